// PendingTaskPool: records of finished normal tasks, handed back by the io
// thread for the next SubmitTask to reuse. Thread-safe. Internal to core/worker.
//
// Why: a task record is made on the submitting thread and ends on the io
// thread. With glibc's malloc a block freed on another thread than the one
// that allocated it goes back through the allocating thread's arena (under its
// lock), and that thread's next allocation of the size misses its per-thread
// cache: in `single_client_tasks_async` the driver's main thread spent about a
// third of its time in malloc (stop 35, perf). Handed back instead, a record
// is reset, and what it still holds (its function name's and argument list's
// buffers) freed, on a submitting thread, which then allocates the same sizes
// again from its own cache.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "core/worker/pending_task.h"

namespace lumen::runtime {

class PendingTaskPool {
 public:
  // At most this many records are kept (~300 bytes each, plus what they hold).
  static constexpr size_t kMaxKept = 1024;
  // A record whose argument values hold more than this is not kept (a kept
  // record keeps its buffers until it is taken again).
  static constexpr size_t kMaxKeptArgumentBytes = 1024;

  PendingTaskPool();

  // A record as new (every field at its default): a kept one, else a new one.
  std::unique_ptr<PendingTask> Take();

  // `task` has ended (io thread): its argument refs and actor handle are
  // released now, as destroying it would; the record is kept for Take, or
  // destroyed when the pool is full or it holds large values.
  void Give(std::unique_ptr<PendingTask> task);

  size_t kept() const;

 private:
  mutable absl::Mutex mu_;
  std::vector<std::unique_ptr<PendingTask>> kept_ ABSL_GUARDED_BY(mu_);
};

}  // namespace lumen::runtime
