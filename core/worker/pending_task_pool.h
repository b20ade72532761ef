// PendingTaskPool: records of finished normal tasks, handed back by the io
// thread for the next SubmitTask to reuse (a RecordPool, record_pool.h, which
// says why). Thread-safe. Internal to core/worker.
#pragma once

#include <cstddef>
#include <memory>

#include "core/worker/pending_task.h"
#include "core/worker/record_pool.h"

namespace lumen::runtime {

class PendingTaskPool {
 public:
  // At most this many records are kept (~300 bytes each, plus what they hold).
  static constexpr size_t kMaxKept = 1024;
  // A record whose arguments hold more than this is not kept.
  static constexpr size_t kMaxKeptArgumentBytes = RecordPool<PendingTask>::kMaxHeldBytes;

  // A record as new (every field at its default): a kept one, else a new one.
  std::unique_ptr<PendingTask> Take() { return records_.Take(); }

  // `task` has ended (io thread): its argument refs and actor handle are
  // released now, as destroying it would; the record is kept for Take, or
  // destroyed when the pool is full or it holds large values.
  void Give(std::unique_ptr<PendingTask> task);

  size_t kept() const { return records_.kept(); }

 private:
  RecordPool<PendingTask> records_{kMaxKept};
};

}  // namespace lumen::runtime
