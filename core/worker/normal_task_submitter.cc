#include "core/worker/normal_task_submitter.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "lumen/common/failure_types.h"
#include "lumen/common/logging.h"
#include "lumen/common/proto_util.h"
#include "lumen/common/task_events.h"

namespace lumen::runtime {

NormalTaskSubmitter::NormalTaskSubmitter(LeaseRequester& leases, TaskManager& tasks,
                                         NormalTaskTransport& transport, Options options)
    : leases_requester_(leases), tasks_(tasks), transport_(transport), options_(options) {}

NormalTaskSubmitter::~NormalTaskSubmitter() = default;

void NormalTaskSubmitter::Submit(std::unique_ptr<PendingTask> task) {
  io_thread_.Check("NormalTaskSubmitter::Submit");
  // Its placement is read here once: the queue keeps it for every task of the
  // shape (retries go back to the same queue), so the task drops its copy.
  std::unique_ptr<TaskPlacement> placement = std::move(task->placement);
  auto& slot = queues_[placement->queue_key];
  if (!slot) {
    slot = std::make_unique<SchedulingQueue>();
    slot->key = std::move(placement->queue_key);
    slot->shape.resources = placement->resources.empty() ? DefaultTaskResources()
                                                         : std::move(placement->resources);
    slot->shape.scheduling = std::move(placement->scheduling);
    slot->shape.name = task->name();
    slot->shape.retriable = task->max_retries != 0;
  }
  tasks_.ReleasePlacement(std::move(placement));
  slot->ready.push_back(std::move(task));
  Dispatch(*slot);
}

void NormalTaskSubmitter::Dispatch(SchedulingQueue& queue) {
  io_thread_.Check("NormalTaskSubmitter::Dispatch");
  // Pipelining several tasks per worker pays only for short tasks with a backlog;
  // otherwise one at a time, so a long task never holds up others behind it
  // while a CPU is free.
  // Once a backlog pipelines, its tail does too, until nothing is ready.
  const bool short_tasks = queue.avg_exec_micros >= 0 && queue.avg_exec_micros < 1000;
  if (!short_tasks || queue.ready.empty()) {
    queue.pipelining = false;
  } else if (queue.ready.size() >= 32 && queue.ready.size() > 4 * queue.num_leases) {
    queue.pipelining = true;
  }
  const size_t depth = queue.pipelining ? PipelineDepth(queue.avg_exec_micros) : 1;
  while (!queue.ready.empty() && !queue.usable.empty()) {
    auto [load, key] = *queue.usable.begin();  // the least loaded, then the oldest
    if (load >= depth) break;
    auto task = std::move(queue.ready.front());
    queue.ready.pop_front();
    PushTask(*leases_.at(key), std::move(task));
  }
  // Recomputed each time: a refused request fails the queued tasks at once.
  while (static_cast<size_t>(queue.pending_lease_requests) <
         std::min<size_t>(queue.ready.size(), options_.max_pending_lease_requests)) {
    RequestLease(queue);
  }
}

size_t NormalTaskSubmitter::PipelineDepth(double avg_exec_micros) const {
  const size_t most = static_cast<size_t>(std::max(1, options_.max_tasks_in_flight_per_worker));
  const size_t least = std::min(kMinPipelineDepth, most);
  const double covering = kPipelinedWorkMicros / std::max(avg_exec_micros, 1.0);
  return std::clamp(static_cast<size_t>(covering), least, most);
}

void NormalTaskSubmitter::FailQueued(SchedulingQueue& queue, const Failure& failure) {
  while (!queue.ready.empty()) {
    auto task = std::move(queue.ready.front());
    queue.ready.pop_front();
    tasks_.Fail(std::move(task), failure);
  }
}

void NormalTaskSubmitter::RequestLease(SchedulingQueue& queue) {
  if (!transport_.LocalNodeConnected()) {
    FailQueued(queue, Failure{proto::FailureKind::OBJECT_LOST, "",
                              "lost the connection to the node daemon", ""});
    return;
  }
  ++queue.pending_lease_requests;
  // The queue stays while a request of it is pending (MaybeDropQueueLater).
  SchedulingQueue* q = &queue;
  leases_requester_.Acquire(queue.shape, [this, q](proto::LeaseReply::Reader reply,
                                                   std::shared_ptr<Connection> node) {
    OnLeaseReply(*q, reply, std::move(node));
  });
}

void NormalTaskSubmitter::OnLeaseReply(SchedulingQueue& queue, proto::LeaseReply::Reader reply,
                                       std::shared_ptr<Connection> node) {
  io_thread_.Check("NormalTaskSubmitter::OnLeaseReply");
  if (!reply.getGranted()) {
    --queue.pending_lease_requests;
    // No node can ever run this shape: fail what waits for it.
    FailQueued(queue, Failure{proto::FailureKind::OTHER, "", reply.getError().cStr(), ""});
    MaybeDropQueueLater(queue.key);
    return;
  }
  NodeId node_id = IdFrom<NodeId>(reply.getNodeId());
  if (dead_nodes_.contains(node_id)) {
    // Granted by a node the cluster has given up on (the reply crossed the
    // news): nothing runs there; the tasks wait for a lease elsewhere.
    LUMEN_LOG(DEBUG) << "dropping a lease granted by dead node " << node_id.Hex().substr(0, 12);
    --queue.pending_lease_requests;
    transport_.EndLease(node, reply.getLeaseId(), /*kill=*/true);
    Dispatch(queue);
    MaybeDropQueueLater(queue.key);
    return;
  }
  auto lease = std::make_unique<Lease>();
  uint64_t key = next_lease_key_++;
  lease->key = key;
  lease->lease_id = reply.getLeaseId();
  lease->worker_id = IdFrom<WorkerId>(reply.getWorkerId());
  lease->worker_pid = reply.getWorkerPid();
  lease->node = std::move(node);
  lease->node_id = node_id;
  for (int id : reply.getGpuIds()) lease->gpu_ids.push_back(id);
  lease->queue = &queue;
  ++queue.num_leases;
  leases_.emplace(key, std::move(lease));
  // Still counted as a pending request until its worker is connected.
  transport_.ConnectWorker(
      reply.getWorkerAddress().cStr(),
      NormalTaskTransport::WorkerHandlers{
          .on_reply = [this, key](proto::TaskReply::Reader r) { OnTaskReply(key, r); },
          .on_lost = [this, key](const absl::Status& why) { OnLeaseLost(key, why); },
      },
      [this, key](absl::StatusOr<std::unique_ptr<LeasedWorker>> worker) {
        OnWorkerConnected(key, std::move(worker));
      });
}

void NormalTaskSubmitter::OnWorkerConnected(uint64_t key,
                                            absl::StatusOr<std::unique_ptr<LeasedWorker>> worker) {
  io_thread_.Check("NormalTaskSubmitter::OnWorkerConnected");
  auto it = leases_.find(key);
  if (it == leases_.end()) {
    if (worker.ok()) (*worker)->Close(absl::CancelledError("lease dropped"));
    return;
  }
  Lease& lease = *it->second;
  SchedulingQueue& queue = *lease.queue;
  --queue.pending_lease_requests;
  if (!worker.ok() || lease.node_dead) {
    std::unique_ptr<Lease> owned = TakeLease(lease);
    if (!worker.ok()) {
      // The worker died between grant and connect; its node reclaims the lease.
      LUMEN_LOG(DEBUG) << "cannot reach leased worker pid " << owned->worker_pid << ": "
                       << worker.status();
      transport_.EndLease(owned->node, owned->lease_id, /*kill=*/false);
    } else {
      // Its node died while we connected: nothing runs there.
      transport_.EndLease(owned->node, owned->lease_id, /*kill=*/true);
      (*worker)->Close(absl::UnavailableError("its node was declared dead"));
    }
    owned.reset();
    Dispatch(queue);
    MaybeDropQueueLater(queue.key);
    return;
  }
  lease.worker = *std::move(worker);
  Reindex(lease);
  Dispatch(queue);
  MaybeReturnLease(lease);
}

void NormalTaskSubmitter::PushTask(Lease& lease, std::unique_ptr<PendingTask> task) {
  if (lease.idle_timer) lease.idle_timer->Cancel();
  // Folded into FINISHED/FAILED (TaskManager).
  task->lease_tick = TaskEvents().Tick();
  task->lease_node = lease.node_id;
  task->lease_worker_pid = lease.worker_pid;
  lease.worker->Push(*task, lease.gpu_ids);
  lease.in_flight.emplace(task->task_id, std::move(task));
  Reindex(lease);
}

void NormalTaskSubmitter::OnTaskReply(uint64_t key, proto::TaskReply::Reader reply) {
  io_thread_.Check("NormalTaskSubmitter::OnTaskReply");
  auto lit = leases_.find(key);
  if (lit == leases_.end()) return;
  Lease& lease = *lit->second;
  auto it = lease.in_flight.find(IdFrom<TaskId>(reply.getTaskId()));
  if (it == lease.in_flight.end()) return;
  std::unique_ptr<PendingTask> task = std::move(it->second);
  lease.in_flight.erase(it);
  SchedulingQueue& queue = *lease.queue;
  if (reply.getRequeued()) {
    // Pipelined behind a task that now waits in Get: run it on another worker
    // (unless it was cancelled meanwhile: it then ends here).
    lease.worker_blocked = true;
    Reindex(lease);
    if (!task->cancelled) queue.ready.push_back(std::move(task));
    Dispatch(queue);
    return;
  }
  if (lease.in_flight.empty()) lease.worker_blocked = false;
  Reindex(lease);
  double micros = static_cast<double>(reply.getExecMicros());
  queue.avg_exec_micros =
      queue.avg_exec_micros < 0 ? micros : 0.8 * queue.avg_exec_micros + 0.2 * micros;
  proto::Value::Reader result = reply.getResult();
  if (task->cancelled) {
    // Its object failed with TaskCancelledError already: the answer is
    // dropped, but what ran is still shown.
    tasks_.RecordUnfinishedAttempt(*task, reply);
  } else if (task->retry_exceptions && result.isError() &&
             result.getError().getKind() == proto::FailureKind::TASK_ERROR &&
             tasks_.ConsumeRetry(*task)) {
    LUMEN_LOG(INFO) << task->name() << " threw; retrying (attempt " << task->attempt + 1
                    << ", retry_exceptions)";
    tasks_.RecordUnfinishedAttempt(*task, reply);
    queue.ready.push_back(std::move(task));
  } else {
    tasks_.Complete(*task, reply);
    if (result.isStored()) {
      // Kept as its object's lineage (object_recovery.h), to be queued again
      // the same way if every copy is lost.
      task->placement = std::make_unique<TaskPlacement>(
          TaskPlacement{queue.shape.resources, queue.shape.scheduling, queue.key});
      tasks_.KeepLineage(std::move(task));
    }
  }
  // Releases the argument refs (unless kept as lineage); the record is reused.
  if (task) tasks_.Release(std::move(task));
  Dispatch(queue);
  MaybeReturnLease(lease);
}

void NormalTaskSubmitter::OnLeaseLost(uint64_t key, const absl::Status& why) {
  io_thread_.Check("NormalTaskSubmitter::OnLeaseLost");
  auto it = leases_.find(key);
  if (it == leases_.end()) return;  // returned or dropped by us
  std::unique_ptr<Lease> owned = TakeLease(*it->second);
  SchedulingQueue& queue = *owned->queue;
  if (owned->idle_timer) owned->idle_timer->Cancel();
  // The worker may be alive but unreachable: its node ends it and frees the lease.
  transport_.EndLease(owned->node, owned->lease_id, /*kill=*/true);
  std::vector<std::unique_ptr<PendingTask>> retry;
  auto failed = std::make_shared<std::vector<std::unique_ptr<PendingTask>>>();
  for (auto& [id, task] : owned->in_flight) {
    // A cancelled task's object failed already; it goes with the lease.
    if (task->cancelled) continue;
    if (owned->killed_for_cancel) {
      // Killed for another task's Cancel(force): not this task's failure.
      ++task->attempt;
      retry.push_back(std::move(task));
      continue;
    }
    if (tasks_.ConsumeRetry(*task)) {
      LUMEN_LOG(INFO) << "worker pid " << owned->worker_pid << " died running "
                      << task->name() << "; retrying (attempt " << task->attempt + 1 << ")";
      retry.push_back(std::move(task));
    } else {
      failed->push_back(std::move(task));
    }
  }
  for (auto rit = retry.rbegin(); rit != retry.rend(); ++rit) {
    queue.ready.push_front(std::move(*rit));
  }
  owned->in_flight.clear();
  if (!failed->empty()) {
    // These fail for good: first learn from the worker's node daemon how the
    // process ended (its socket closes before the daemon reaps it), so the
    // error says why; the old text if the daemon cannot say in time.
    int pid = owned->worker_pid;
    std::string node = owned->node_id.IsNil() ? "?" : owned->node_id.Hex().substr(0, 12);
    std::string closed = std::string(why.message());
    auto fail_all = [this, failed, pid, node, closed](std::string cause) {
      for (auto& task : *failed) {
        std::string message = absl::StrCat(
            "the worker (pid ", pid, ") running task ", task->name(), " on node ", node,
            " died: ", cause.empty() ? closed : cause, "; no retries left (max_retries=",
            task->max_retries, ")");
        // Killed by its node's memory monitor: lumen::OutOfMemoryError.
        const bool oom = cause.find(kMemoryMonitorKillTag) != std::string::npos;
        tasks_.Fail(std::move(task), Failure{proto::FailureKind::WORKER_CRASHED,
                                             oom ? kOutOfMemoryErrorType : "", message, ""});
      }
      failed->clear();
    };
    if (owned->node_dead) {
      fail_all("");
    } else {
      transport_.AskWorkerExitCause(owned->node, owned->worker_id, std::move(fail_all));
    }
  }
  owned.reset();  // its connection is released once its closing callbacks ran
  Dispatch(queue);
  MaybeDropQueueLater(queue.key);
}

void NormalTaskSubmitter::MaybeReturnLease(Lease& lease) {
  if (!lease.worker || !lease.in_flight.empty() || !lease.queue->ready.empty()) return;
  if (lease.return_when_idle) {
    ReturnLease(lease);
    return;
  }
  // Keep an idle lease a little for the next task of its shape (a synchronous
  // loop then never waits for a lease), unless the node asks for it back.
  if (!lease.idle_timer) lease.idle_timer = transport_.NewTimer();
  uint64_t key = lease.key;
  lease.idle_timer->Arm(options_.lease_idle_timeout, [this, key] {
    // The lease may be gone by now: find it again.
    auto it = leases_.find(key);
    if (it == leases_.end()) return;
    Lease& idle = *it->second;
    if (idle.in_flight.empty() && idle.queue->ready.empty()) ReturnLease(idle);
  });
}

void NormalTaskSubmitter::ReturnLease(Lease& lease) {
  std::unique_ptr<Lease> owned = TakeLease(lease);
  if (owned->idle_timer) owned->idle_timer->Cancel();
  transport_.EndLease(owned->node, owned->lease_id, /*kill=*/false);
  // Taken first: the close handler finds no lease and does nothing.
  if (owned->worker) owned->worker->Close(absl::CancelledError("lease returned"));
  std::string key = owned->queue->key;
  owned.reset();
  MaybeDropQueueLater(key);
}

std::unique_ptr<NormalTaskSubmitter::Lease> NormalTaskSubmitter::TakeLease(Lease& lease) {
  SchedulingQueue& queue = *lease.queue;
  if (lease.usable_entry) {
    queue.usable.erase(*lease.usable_entry);
    lease.usable_entry.reset();
  }
  --queue.num_leases;
  auto it = leases_.find(lease.key);
  std::unique_ptr<Lease> owned = std::move(it->second);
  leases_.erase(it);
  return owned;
}

void NormalTaskSubmitter::Reindex(Lease& lease) {
  bool usable = lease.worker != nullptr && !lease.node_dead &&
                !(lease.worker_blocked && !lease.in_flight.empty());
  std::optional<std::pair<size_t, uint64_t>> entry;
  if (usable) entry.emplace(lease.in_flight.size(), lease.key);
  if (entry == lease.usable_entry) return;
  SchedulingQueue& queue = *lease.queue;
  if (lease.usable_entry && entry) {
    // Moved within the index: its node is reused (no allocation per push and reply).
    auto node = queue.usable.extract(*lease.usable_entry);
    node.value() = *entry;
    queue.usable.insert(std::move(node));
  } else if (lease.usable_entry) {
    queue.usable.erase(*lease.usable_entry);
  } else {
    queue.usable.insert(*entry);
  }
  lease.usable_entry = entry;
}

void NormalTaskSubmitter::MaybeDropQueueLater(const std::string& key) {
  // Posted: the caller may still hold the queue. A queue with no task, lease or
  // lease request left goes (a shape used once does not stay forever).
  transport_.Post("worker.maybe_drop_queue", [this, key] {
    auto it = queues_.find(key);
    if (it == queues_.end()) return;
    const SchedulingQueue& q = *it->second;
    if (q.ready.empty() && q.num_leases == 0 && q.pending_lease_requests == 0) queues_.erase(it);
  });
}

void NormalTaskSubmitter::OnReclaimLeases() {
  io_thread_.Check("NormalTaskSubmitter::OnReclaimLeases");
  // Another request waits for resources our idle leases hold: give them back now,
  // and the busy ones (and those still connecting) as soon as they go idle.
  std::vector<uint64_t> idle;
  for (auto& [key, lease] : leases_) {
    lease->return_when_idle = true;
    if (lease->worker && lease->in_flight.empty() && lease->queue->ready.empty()) {
      idle.push_back(key);
    }
  }
  for (uint64_t key : idle) {
    auto it = leases_.find(key);
    if (it != leases_.end()) ReturnLease(*it->second);
  }
}

std::vector<std::shared_ptr<Connection>> NormalTaskSubmitter::OnNodeDead(const NodeId& node,
                                                                         const absl::Status& why) {
  io_thread_.Check("NormalTaskSubmitter::OnNodeDead");
  dead_nodes_.insert(node);
  // Marked first, closed after: retries must not pick another lease there.
  std::vector<uint64_t> doomed;
  std::vector<std::shared_ptr<Connection>> daemons;
  for (auto& [key, lease] : leases_) {
    if (lease->node_id != node) continue;
    lease->node_dead = true;
    Reindex(*lease);
    if (lease->worker) doomed.push_back(key);
    if (lease->node) daemons.push_back(lease->node);
  }
  for (uint64_t key : doomed) {
    auto it = leases_.find(key);
    if (it != leases_.end() && it->second->worker) it->second->worker->Close(why);
  }
  return daemons;
}

bool NormalTaskSubmitter::Cancel(const TaskId& id, bool force) {
  io_thread_.Check("NormalTaskSubmitter::Cancel");
  for (auto& [key, queue] : queues_) {
    auto& ready = queue->ready;
    auto it = std::find_if(ready.begin(), ready.end(),
                           [&](const std::unique_ptr<PendingTask>& t) { return t->task_id == id; });
    if (it == ready.end()) continue;
    std::unique_ptr<PendingTask> task = std::move(*it);
    ready.erase(it);
    tasks_.Cancel(*task, " before it started");
    task.reset();  // releases the argument refs
    MaybeDropQueueLater(queue->key);
    return true;
  }
  for (auto& [key, lease] : leases_) {
    auto it = lease->in_flight.find(id);
    if (it == lease->in_flight.end()) continue;
    PendingTask& task = *it->second;
    if (task.cancelled) return true;
    if (!force) {
      tasks_.Cancel(task, " while on worker pid " + std::to_string(lease->worker_pid) +
                              " (force=false: the worker runs it to its end)");
      return true;
    }
    tasks_.Cancel(task, " while on worker pid " + std::to_string(lease->worker_pid) +
                            ", which was killed (force=true)");
    lease->killed_for_cancel = true;
    // OnLeaseLost (possibly inside Close) asks the node to kill the worker and
    // requeues the lease's other tasks; `lease` may be gone after this line.
    lease->worker->Close(absl::CancelledError("a task on this worker was cancelled with force"));
    return true;
  }
  return false;
}

void NormalTaskSubmitter::CloseAll(const absl::Status& why) {
  io_thread_.Check("NormalTaskSubmitter::CloseAll");
  std::vector<uint64_t> open;
  for (auto& [key, lease] : leases_) {
    if (lease->idle_timer) lease->idle_timer->Cancel();
    if (lease->worker) open.push_back(key);
  }
  for (uint64_t key : open) {
    auto it = leases_.find(key);
    if (it != leases_.end() && it->second->worker) it->second->worker->Close(why);
  }
}

void NormalTaskSubmitter::Clear() {
  // Leases first: they point at their queues.
  leases_.clear();
  queues_.clear();
}

void NormalTaskSubmitter::ForEachTask(
    const std::function<void(const PendingTask&, const NodeId* node, int worker_pid)>& fn) const {
  for (const auto& [key, queue] : queues_) {
    for (const auto& task : queue->ready) fn(*task, nullptr, 0);
  }
  for (const auto& [key, lease] : leases_) {
    for (const auto& [id, task] : lease->in_flight) fn(*task, &lease->node_id, lease->worker_pid);
  }
}

}  // namespace lumen::runtime
