#include "core/worker/task_receiver.h"

namespace lumen::runtime {

std::unique_ptr<TaskToRun> TaskReceiver::Receive(std::unique_ptr<TaskToRun> task) {
  absl::MutexLock lock(&mu_);
  if (exiting()) return nullptr;  // dropped: the actor is exiting
  // An actor's calls run here whatever it waits for; a plain task blocked in
  // Get hands new ones back.
  if (blocked_ && !is_actor()) return task;
  queue_.push_back(std::move(task));
  queued_.fetch_add(1, std::memory_order_release);
  return nullptr;
}

std::unique_ptr<TaskToRun> TaskReceiver::PopLocked() {
  auto task = std::move(queue_.front());
  queue_.pop_front();
  queued_.fetch_sub(1, std::memory_order_release);
  return task;
}

std::unique_ptr<TaskToRun> TaskReceiver::Take() {
  absl::MutexLock lock(&mu_);
  // Re-evaluated by the Mutex whenever another thread releases mu_ (Receive,
  // Stop), never on a timer. An exiting actor takes nothing: its threads
  // sleep until the process ends rather than spin on what it still queues.
  // Await calls it with mu_ held.
  auto have_work = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    wait_checks_.fetch_add(1, std::memory_order_relaxed);
    return stopped() || (!queue_.empty() && !exiting());
  };
  waiting_.fetch_add(1, std::memory_order_acq_rel);
  mu_.Await(absl::Condition(&have_work));
  waiting_.fetch_sub(1, std::memory_order_acq_rel);
  // StopAfterCurrent does not take mu_: look again.
  if (stopped() || exiting()) return nullptr;
  return PopLocked();
}

std::unique_ptr<TaskToRun> TaskReceiver::TryTake() {
  absl::MutexLock lock(&mu_);
  if (queue_.empty() || exiting() || stopped()) return nullptr;
  return PopLocked();
}

void TaskReceiver::Stop() {
  absl::MutexLock lock(&mu_);
  // Set under the lock: the unlock re-evaluates the waiters' conditions.
  stopped_.store(true, std::memory_order_release);
}

std::vector<std::unique_ptr<TaskToRun>> TaskReceiver::SetBlocked(bool blocked) {
  std::vector<std::unique_ptr<TaskToRun>> handed_back;
  absl::MutexLock lock(&mu_);
  if (!blocked) {
    blocked_ = false;
    return handed_back;
  }
  if (is_actor()) return handed_back;
  blocked_ = true;
  handed_back.reserve(queue_.size());
  for (auto& task : queue_) handed_back.push_back(std::move(task));
  queue_.clear();
  queued_.store(0, std::memory_order_release);
  return handed_back;
}

void TaskReceiver::DropQueued() {
  absl::MutexLock lock(&mu_);
  blocked_ = true;
  queue_.clear();
  queued_.store(0, std::memory_order_release);
}

void TaskReceiver::Recycle(std::unique_ptr<TaskToRun> task) {
  if (!task) return;
  size_t argument_bytes = task->args.capacity() * sizeof(TaskToRun::Arg);
  for (const TaskToRun::Arg& arg : task->args) {
    argument_bytes += arg.value.capacity() + arg.node_address.capacity() + arg.owner.capacity();
  }
  task->reply_to.reset();
  records_.Keep(std::move(task), argument_bytes);
}

}  // namespace lumen::runtime
