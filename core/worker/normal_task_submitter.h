// The normal-task submitter of one driver or worker process (Ray's
// NormalTaskSubmitter, smaller): tasks whose arguments are ready wait in a
// scheduling queue per shape (resources + strategy); each queue asks the
// LeaseRequester for worker leases, pushes its tasks straight to the leased
// workers (several per worker for short tasks with a backlog: pipelining),
// keeps an idle lease a moment for the next task of its shape, gives leases
// back when the node asks, and handles lost workers and dead nodes (a task is
// retried or failed per its budget through the TaskManager).
//
//   NormalTaskSubmitter submitter(leases, tasks, transport, {.max_tasks_in_flight_per_worker = 48});
//   submitter.Submit(std::move(task));   // its arguments are ready
//   submitter.OnNodeDead(node);          // the cluster gave up on `node`
//
// Invariants: a task is in exactly one place (a queue's ready list, or one
// lease's in-flight map) until the TaskManager completes or fails it; nothing
// is pushed to a lease whose node was declared dead, also when the lease's
// grant or its worker's connect completes after the death.
//
// Cost of each operation (issue 17: no quadratic path on pending tasks):
//   Submit, dispatching one task, a task reply, a requeued task: O(log L)
//     (L: leases of the task's shape; the least-loaded usable lease is the
//     first of an ordered index), queue lookup O(1) expected (hash map);
//   a lease granted, connected, returned or lost: O(log L) plus O(1) per task
//     it held;
//   OnReclaimLeases, OnNodeDead, CloseAll: O(total leases); ForEachTask,
//     Clear: O(tasks).
//
// Only on the io thread (checked in debug builds), except Clear (after the io
// thread has ended). What it needs from the runtime (the leased workers'
// connections, the node daemons, timers, posting) comes through
// NormalTaskTransport. Internal to core/worker.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/worker/lease_requester.h"
#include "core/worker/pending_task.h"
#include "core/worker/task_manager.h"
#include "lumen/common/connection.h"
#include "lumen/common/ids.h"
#include "lumen/common/thread_checker.h"

namespace lumen::runtime {

// A connection to one leased worker, as the submitter uses it. io thread.
class LeasedWorker {
 public:
  virtual ~LeasedWorker() = default;
  // Sends `task` to run on the worker with `gpu_ids` (in order with earlier pushes).
  virtual void Push(const PendingTask& task, const std::vector<int>& gpu_ids) = 0;
  // Closes the connection; its on_lost handler runs (possibly inside this call)
  // unless the runtime is stopping.
  virtual void Close(const absl::Status& why) = 0;
};

// A one-shot timer on the io thread. Destroying it cancels it.
class OneShotTimer {
 public:
  virtual ~OneShotTimer() = default;
  // Runs `fn` on the io thread after `delay`; replaces a pending one, which never runs.
  virtual void Arm(std::chrono::milliseconds delay, std::function<void()> fn) = 0;
  virtual void Cancel() = 0;
};

// What the submitter needs from the runtime. CoreWorker implements it over its
// connections and io thread; tests fake it, holding every callback. io thread.
class NormalTaskTransport {
 public:
  struct WorkerHandlers {
    std::function<void(proto::TaskReply::Reader)> on_reply;  // a reply from the worker
    std::function<void(const absl::Status&)> on_lost;         // its connection closed
  };
  using ConnectDone = std::function<void(absl::StatusOr<std::unique_ptr<LeasedWorker>>)>;

  virtual ~NormalTaskTransport() = default;
  // Whether our own node daemon is connected.
  virtual bool LocalNodeConnected() = 0;
  // Connects to the leased worker at `address` without blocking: `done` runs
  // once, on the io thread and never inside this call, with the connection
  // or the connect's error (never when the runtime stops first). Once
  // connected, `handlers` run for its replies and its loss.
  virtual void ConnectWorker(const std::string& address, WorkerHandlers handlers,
                             ConnectDone done) = 0;
  // Tells the daemon `node` that granted lease `lease_id` that it ends
  // (`kill`: the worker may be unreachable, end it). Nothing when `node` is
  // null or closed.
  virtual void EndLease(const std::shared_ptr<Connection>& node, uint64_t lease_id,
                        bool kill) = 0;
  // Asks the daemon `node` how worker `worker` ended; `done` runs once on the
  // io thread with the cause, or "" when it cannot say in time.
  virtual void AskWorkerExitCause(const std::shared_ptr<Connection>& node, const WorkerId& worker,
                                  std::function<void(std::string cause)> done) = 0;
  virtual std::unique_ptr<OneShotTimer> NewTimer() = 0;
  // Runs `fn` on the io thread later, under `name` (a string literal).
  virtual void Post(const char* name, std::function<void()> fn) = 0;
};

class NormalTaskSubmitter {
 public:
  struct Options {
    // The most short tasks of a backlog pipelined to one worker (PipelineDepth).
    int max_tasks_in_flight_per_worker = 48;
    int max_pending_lease_requests = 4;       // per shape
    std::chrono::milliseconds lease_idle_timeout{200};  // Timeouts::lease_idle_timeout
  };

  // `leases`, `tasks` and `transport` outlive the submitter.
  NormalTaskSubmitter(LeaseRequester& leases, TaskManager& tasks, NormalTaskTransport& transport,
                      Options options);
  NormalTaskSubmitter(const NormalTaskSubmitter&) = delete;
  NormalTaskSubmitter& operator=(const NormalTaskSubmitter&) = delete;
  ~NormalTaskSubmitter();

  // A task whose arguments are ready (and none failed) joins its shape's queue.
  void Submit(std::unique_ptr<PendingTask> task);
  // Our node wants resources back: idle leases are returned now, busy ones
  // once idle.
  void OnReclaimLeases();
  // `node` was declared dead: no task goes to a lease there any more (also
  // one granted or connected later); the workers' connections there close, so
  // what they ran is retried or failed. Returns the daemon connections that
  // granted those leases, for the caller to close.
  std::vector<std::shared_ptr<Connection>> OnNodeDead(const NodeId& node, const absl::Status& why);
  // lumen::Cancel of task `id`: one waiting in a queue is removed and fails
  // with TaskCancelledError; one on a worker is marked cancelled (its object
  // fails now, whatever the worker answers is dropped, it is never retried)
  // and, with `force`, that worker's connection closes and its node kills it
  // (the other tasks pipelined there are requeued without using their retry
  // budget). Returns false when no task `id` is here (not submitted yet,
  // finished, or not a normal task). O(queued tasks + leases).
  bool Cancel(const TaskId& id, bool force);
  // Shutting down: cancels the idle timers and closes every worker connection
  // (their on_lost is not expected to reach us any more).
  void CloseAll(const absl::Status& why);
  // Drops every queued and in-flight task (their refs go). Only once the io
  // thread has ended.
  void Clear();

  // Every task not finished yet: `node` and `worker_pid` are where it runs,
  // or null and 0 while it waits.
  void ForEachTask(
      const std::function<void(const PendingTask&, const NodeId* node, int worker_pid)>& fn) const;

  // For tests: how many leases and scheduling queues exist now.
  size_t TEST_NumLeases() const { return leases_.size(); }
  size_t TEST_NumQueues() const { return queues_.size(); }

 private:
  struct SchedulingQueue;
  // A worker leased from a node daemon; tasks of one shape go straight to it.
  struct Lease {
    uint64_t key = 0;  // ours, unique in this process (leases_ is keyed by it)
    uint64_t lease_id = 0;  // the granting daemon's
    WorkerId worker_id;
    int worker_pid = 0;
    std::shared_ptr<Connection> node;  // the daemon that granted it
    NodeId node_id;
    std::unique_ptr<LeasedWorker> worker;  // null while connecting
    SchedulingQueue* queue = nullptr;
    absl::flat_hash_map<TaskId, std::unique_ptr<PendingTask>> in_flight;
    std::unique_ptr<OneShotTimer> idle_timer;
    std::vector<int> gpu_ids;       // its worker's GPUs
    bool return_when_idle = false;  // the node asked for it back
    bool node_dead = false;         // its node was declared dead: being closed
    bool worker_blocked = false;    // its worker waits in Get: send it nothing more
    bool killed_for_cancel = false;  // closed by Cancel(force): its other tasks keep their budget
    // Its entry in queue->usable, if any: (in-flight count, key).
    std::optional<std::pair<size_t, uint64_t>> usable_entry;
  };
  struct SchedulingQueue {
    std::string key;
    LeaseShape shape;
    std::deque<std::unique_ptr<PendingTask>> ready;
    size_t num_leases = 0;  // connecting or connected
    // The leases that can take a task now, least loaded (then oldest) first.
    std::set<std::pair<size_t, uint64_t>> usable;
    // Lease requests out, counted until the granted worker is connected.
    int pending_lease_requests = 0;
    // Moving average of how long tasks of this shape run: short tasks are
    // pipelined several per worker, long ones go one per worker.
    double avg_exec_micros = -1;
    // A backlog of short tasks started pipelining: its tail is pipelined too,
    // until the ready queue empties (otherwise its last 31 tasks went one per
    // worker, a round trip each).
    bool pipelining = false;
  };

  // Tasks in flight to one worker while a backlog of short ones pipelines:
  // enough to keep the worker busy across its owner's turnaround (the replies
  // back, the next pushes out: on 2 busy cores a wake-up is ~100 µs), so about
  // kPipelinedWorkMicros of work, and at least kMinPipelineDepth, at most
  // max_tasks_in_flight_per_worker. Microsecond tasks get the most (48: on 2
  // cores single_client_tasks_async 1.49 and multi_client_tasks_async 1.41 of
  // 16's, doc/benchmark.md "Stop 38"); tasks of 63 µs or longer 16, as all
  // short tasks did before, so that no worker's queue holds more than ~16
  // tasks' worth of the backlog while another worker could take it.
  size_t PipelineDepth(double avg_exec_micros) const;
  static constexpr double kPipelinedWorkMicros = 1000;
  static constexpr size_t kMinPipelineDepth = 16;

  void Dispatch(SchedulingQueue& queue);
  void RequestLease(SchedulingQueue& queue);
  void OnLeaseReply(SchedulingQueue& queue, proto::LeaseReply::Reader reply,
                    std::shared_ptr<Connection> node);
  void OnWorkerConnected(uint64_t key, absl::StatusOr<std::unique_ptr<LeasedWorker>> worker);
  void PushTask(Lease& lease, std::unique_ptr<PendingTask> task);
  void OnTaskReply(uint64_t key, proto::TaskReply::Reader reply);
  void OnLeaseLost(uint64_t key, const absl::Status& why);
  void MaybeReturnLease(Lease& lease);
  void ReturnLease(Lease& lease);
  // Removes `lease` from leases_ and its queue's index; the caller owns it.
  std::unique_ptr<Lease> TakeLease(Lease& lease);
  // Puts `lease` in (or out of) its queue's usable index per its state now.
  void Reindex(Lease& lease);
  void FailQueued(SchedulingQueue& queue, const Failure& failure);
  // Erases the queue `key` if nothing is left in it, from a posted handler
  // (the caller may still hold it).
  void MaybeDropQueueLater(const std::string& key);

  LeaseRequester& leases_requester_;
  TaskManager& tasks_;
  NormalTaskTransport& transport_;
  const Options options_;
  ThreadChecker io_thread_;
  absl::flat_hash_map<std::string, std::unique_ptr<SchedulingQueue>> queues_;
  absl::flat_hash_map<uint64_t, std::unique_ptr<Lease>> leases_;
  uint64_t next_lease_key_ = 1;
  // Nodes declared dead (a grant from one is refused). Grows by one per node
  // death in the cluster's life, which is small.
  absl::flat_hash_set<NodeId> dead_nodes_;
};

}  // namespace lumen::runtime
