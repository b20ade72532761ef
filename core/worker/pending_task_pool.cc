#include "core/worker/pending_task_pool.h"

#include <memory>
#include <utility>

namespace lumen::runtime {

PendingTaskPool::PendingTaskPool() {
  absl::MutexLock lock(&mu_);
  kept_.reserve(kMaxKept);
}

std::unique_ptr<PendingTask> PendingTaskPool::Take() {
  std::unique_ptr<PendingTask> task;
  {
    absl::MutexLock lock(&mu_);
    if (!kept_.empty()) {
      task = std::move(kept_.back());
      kept_.pop_back();
    }
  }
  if (!task) return std::make_unique<PendingTask>();
  // Reset in place, here: the buffers it still holds are freed on this thread.
  std::destroy_at(task.get());
  std::construct_at(task.get());
  return task;
}

void PendingTaskPool::Give(std::unique_ptr<PendingTask> task) {
  if (!task) return;
  size_t argument_bytes = task->args.capacity() * sizeof(internal::TaskArgument);
  for (internal::TaskArgument& arg : task->args) {
    arg.ref.reset();  // the argument objects may be freed now, as before
    argument_bytes += arg.value.capacity();
  }
  task->actor.reset();
  task->actor_record.reset();
  task->placement.reset();
  task->dep_failure.reset();
  if (argument_bytes > kMaxKeptArgumentBytes) return;  // destroyed here
  absl::MutexLock lock(&mu_);
  if (kept_.size() < kMaxKept) kept_.push_back(std::move(task));
  // else destroyed here, after the lock
}

size_t PendingTaskPool::kept() const {
  absl::MutexLock lock(&mu_);
  return kept_.size();
}

}  // namespace lumen::runtime
