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
//   while (auto task = receiver.Take()) Run(*task);                     // executor
//   for (auto& back : receiver.SetBlocked(true)) SendRequeued(*back);     // in Get
//   receiver.Stop();                          // the worker ends: Take returns null
//
// An idle executor thread sleeps in Take until a task arrives or Stop: no
// timed wake-ups (10,000 idle actors' workers each waking every 200 ms kept
// two cores busy). Thread-safe (one mutex): Receive runs on the io thread,
// Take and SetBlocked on executor threads, the rest anywhere. Internal to
// core/worker.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "core/worker/record_pool.h"
#include "lumen/common/connection.h"
#include "lumen/common/ids.h"
#include "lumen/common/task_events.h"

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
  // When its arguments were fetched (TaskEventClock; 0: not yet): its
  // ARGS_FETCHED task event.
  uint64_t args_fetched_tick = 0;
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
  // Blocks, untimed, until a task waits or Stop was called, and takes the
  // oldest; null once stopped. An exiting actor's threads wait here until
  // Stop (the process ends first): they take nothing more.
  std::unique_ptr<TaskToRun> Take();
  // Takes the oldest waiting task without blocking; null when there is none,
  // the actor is exiting or the receiver stopped.
  std::unique_ptr<TaskToRun> TryTake();
  // The worker ends: every Take returns null, now and from now on.
  void Stop();
  bool stopped() const { return stopped_.load(std::memory_order_acquire); }

  // Test hooks: threads blocked in Take now, and how many times the
  // condition of a blocked Take was evaluated (each is a wake-up of a waiter
  // or its first check): idle, it must not grow.
  int TEST_waiting() const { return waiting_.load(std::memory_order_acquire); }
  uint64_t TEST_wait_checks() const { return wait_checks_.load(std::memory_order_acquire); }
  // Records kept for NewTask.
  size_t TEST_kept_records() const { return records_.kept(); }

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

  // A record for a task that arrived (io thread): a reused one when an
  // executor gave one back (record_pool.h says why), else a new one.
  std::unique_ptr<TaskToRun> NewTask() { return records_.Take(); }
  // An executor is done with `task` (any thread): kept for NewTask, unless
  // its arguments hold more than kMaxKeptArgumentBytes or enough are kept.
  void Recycle(std::unique_ptr<TaskToRun> task);
  static constexpr size_t kMaxKeptRecords = 64;
  static constexpr size_t kMaxKeptArgumentBytes = RecordPool<TaskToRun>::kMaxHeldBytes;

 private:
  absl::Mutex mu_;
  std::deque<std::unique_ptr<TaskToRun>> queue_ ABSL_GUARDED_BY(mu_);
  std::atomic<int> queued_{0};      // queue_.size(), readable without the lock
  bool blocked_ ABSL_GUARDED_BY(mu_) = false;  // the running task waits in Get
  std::atomic<bool> is_actor_{false};
  std::atomic<bool> exiting_{false};
  std::atomic<bool> stopped_{false};
  std::atomic<int> waiting_{0};
  std::atomic<uint64_t> wait_checks_{0};
  RecordPool<TaskToRun> records_{kMaxKeptRecords};
  // Pops the front; the caller holds mu_ and checked there is one.
  std::unique_ptr<TaskToRun> PopLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
};

}  // namespace lumen::runtime
