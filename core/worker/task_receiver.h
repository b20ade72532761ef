// The receive queue of a worker process (Ray's task receiver, smaller): tasks
// their owners pushed wait here, in arrival order, for the executor thread(s).
// While the task running in a plain worker blocks in Get, the queued tasks and
// any that arrive are handed back to their owners to run elsewhere (the task
// it waits for could be among them; this is not a failed attempt). An actor
// queues its calls whatever it waits for; once it exits after a call, nothing
// more starts and arrivals are dropped (their callers see the actor die).
//
//   TaskReceiver receiver;
//   if (auto back = receiver.Receive(std::move(task))) SendRequeued(*back);  // io thread
//   if (auto task = receiver.Take(absl::Milliseconds(200), give_up)) Run(*task);  // executor
//   for (auto& back : receiver.SetBlocked(true)) SendRequeued(*back);     // in Get
//
// Thread-safe (one mutex): Receive runs on the io thread, Take and SetBlocked
// on executor threads, the rest anywhere. Internal to core/worker.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "lumen/common/connection.h"
#include "lumen/common/ids.h"

namespace lumen::runtime {

// A task received by a worker, decoded out of its frame.
struct TaskToRun {
  std::weak_ptr<Connection> reply_to;
  TaskId task_id;
  uint32_t attempt = 0;
  std::string function;
  proto::TaskKind kind = proto::TaskKind::NORMAL;
  uint32_t max_concurrency = 1;
  std::vector<int> gpu_ids;
  struct Arg {
    std::string value;  // inline bytes
    ObjectId stored;    // or a stored object
    bool is_stored = false;
    uint64_t size = 0;
    NodeId node;               // where a copy of it is
    std::string node_address;
    std::string owner;         // who to tell when we make a copy here
  };
  std::vector<Arg> args;
};

class TaskReceiver {
 public:
  TaskReceiver() = default;
  TaskReceiver(const TaskReceiver&) = delete;
  TaskReceiver& operator=(const TaskReceiver&) = delete;

  // A task arrived. Returns it when it must go back to its owner (a plain
  // worker whose running task blocks); null when it was queued, or dropped
  // because the actor is exiting.
  [[nodiscard]] std::unique_ptr<TaskToRun> Receive(std::unique_ptr<TaskToRun> task);

  // Whether a task waits (lock-free: executor threads spin on it briefly).
  bool HasQueued() const { return queued_.load(std::memory_order_acquire) > 0; }
  // How many tasks wait (lock-free; a snapshot).
  int queued() const { return queued_.load(std::memory_order_acquire); }
  // Waits up to `timeout` for a task, or until `give_up()` holds (checked
  // again on each Wake), and takes the oldest; null when there is none or the
  // actor is exiting. `give_up` runs under the lock: it must only read.
  std::unique_ptr<TaskToRun> Take(absl::Duration timeout, const std::function<bool()>& give_up);
  // Wakes the executor threads waiting in Take to check `give_up` again.
  void Wake();

  // The running task blocks in Get (true) or is done waiting (false). When it
  // starts to block in a plain worker, returns the queued tasks, oldest first,
  // for the caller to hand back; an actor keeps them.
  [[nodiscard]] std::vector<std::unique_ptr<TaskToRun>> SetBlocked(bool blocked);

  // This worker holds an actor from now on (its creation task arrived).
  void BecomeActor() { is_actor_.store(true, std::memory_order_release); }
  bool is_actor() const { return is_actor_.load(std::memory_order_acquire); }
  // The actor exits after the running call: no further call starts.
  void StopAfterCurrent() { exiting_.store(true, std::memory_order_release); }
  bool exiting() const { return exiting_.load(std::memory_order_acquire); }
  // The actor's last reply is going out: whatever waits is dropped.
  void DropQueued();

 private:
  absl::Mutex mu_;
  std::deque<std::unique_ptr<TaskToRun>> queue_ ABSL_GUARDED_BY(mu_);
  std::atomic<int> queued_{0};      // queue_.size(), readable without the lock
  bool blocked_ ABSL_GUARDED_BY(mu_) = false;  // the running task waits in Get
  std::atomic<bool> is_actor_{false};
  std::atomic<bool> exiting_{false};
};

}  // namespace lumen::runtime
