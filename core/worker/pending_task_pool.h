// PendingTaskPool: records of finished normal tasks, handed back by the io
// thread for the next SubmitTask to reuse (a RecordPool, record_pool.h, which
// says why). Thread-safe. Internal to core/worker.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

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
  // destroyed when the pool is full or it holds large values. It carries a
  // placement given back earlier, if one waits, so that the placement is
  // freed by Take on the thread that made it.
  void Give(std::unique_ptr<PendingTask> task);
  // A queued task's placement, read and done with on the io thread (io thread
  // only): made by SubmitTask on the submitting thread, it goes back there
  // inside the next record given (freed on the io thread, it cost the two
  // threads the same cross-thread trips through malloc as a record did). At
  // most kMaxKept wait; more are destroyed.
  void GivePlacement(std::unique_ptr<TaskPlacement> placement);

  size_t kept() const { return records_.kept(); }
  // Placements given back that wait for a record to carry them (io thread).
  size_t placements_waiting() const { return placements_.size(); }

 private:
  RecordPool<PendingTask> records_{kMaxKept};
  // GivePlacement's, for Give to attach (io thread only).
  std::vector<std::unique_ptr<TaskPlacement>> placements_;
};

}  // namespace lumen::runtime
