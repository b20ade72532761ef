#include "core/worker/pending_task_pool.h"

#include <utility>

namespace lumen::runtime {

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
  if (!placements_.empty()) {
    task->placement = std::move(placements_.back());
    placements_.pop_back();
  }
  task->dep_failure.reset();
  records_.Keep(std::move(task), argument_bytes);
}

void PendingTaskPool::GivePlacement(std::unique_ptr<TaskPlacement> placement) {
  if (placement && placements_.size() < kMaxKept) placements_.push_back(std::move(placement));
}

}  // namespace lumen::runtime
