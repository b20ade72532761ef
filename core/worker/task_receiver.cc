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

std::unique_ptr<TaskToRun> TaskReceiver::Take(absl::Duration timeout,
                                              const std::function<bool()>& give_up) {
  absl::MutexLock lock(&mu_);
  auto have_work = [this, &give_up] {
    return queued_.load(std::memory_order_acquire) > 0 || give_up();
  };
  mu_.AwaitWithTimeout(absl::Condition(&have_work), timeout);
  if (queue_.empty() || exiting()) return nullptr;
  auto task = std::move(queue_.front());
  queue_.pop_front();
  queued_.fetch_sub(1, std::memory_order_release);
  return task;
}

void TaskReceiver::Wake() {
  // Releasing the lock re-evaluates the conditions Take waits on.
  absl::MutexLock lock(&mu_);
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

}  // namespace lumen::runtime
