// CoreWorker: the normal-task submitter (dependency resolution, queues per
// shape, leases, pipelining, lost workers). io thread unless noted.
#include "lumen/worker/core_worker.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <typeinfo>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "core/worker/dependency_resolver.h"
#include "core/worker/task_manager.h"
#include "core/worker/worker_state.h"
#include "lumen/common/codec.h"
#include "lumen/common/head_client.h"
#include "lumen/common/logging.h"
#include "lumen/common/process.h"
#include "lumen/common/proto_util.h"
#include "lumen/common/task_events.h"
#include "lumen/errors.h"
#include "lumen/objectstore/fd_passing.h"
#include "lumen/objectstore/object_table.h"

namespace lumen::runtime {

// ---------------------------------------------------------------------------
// Task submission (owner side)

std::shared_ptr<internal::RefHandle> CoreWorker::SubmitTask(
    std::string_view function, std::vector<internal::TaskArgument> args,
    const internal::TaskOptions& options) {
  if (node_lost_) throw Error("lumen: lost the connection to the node daemon");
  auto task = std::make_unique<PendingTask>();
  task->task_id = TaskId::Random();
  task->return_id = ObjectId::ForTaskReturn(task->task_id, 1);
  task->function = std::string(function);
  task->display_name = options.name.empty() ? task->function : options.name;
  task->args = std::move(args);
  task->resources = options.resources;
  if (task->resources.empty()) task->resources["CPU"] = 1;
  task->scheduling = options.scheduling;
  task->queue_key = ResourceShapeKey(task->resources) + SchedulingKey(task->scheduling);
  task->max_retries = task->retries_left = std::max(0, options.max_retries);
  auto handle = std::make_shared<internal::RefHandle>(task->return_id, listen_address_);
  Enqueue(std::move(task));
  return handle;
}

void CoreWorker::MoveLargeArgumentsToStore(std::vector<internal::TaskArgument>& args) {
  for (auto& arg : args) {
    if (!arg.ref && arg.value.size() > options_.inline_limit) {
      arg.ref = PutEncoded(std::move(arg.value));
      arg.value.clear();
    }
  }
}

void CoreWorker::Enqueue(std::unique_ptr<PendingTask> task) {
  TaskEvents().Record(TaskEventKind::kSubmitted, task->task_id, task->attempt, task->kind == proto::TaskKind::NORMAL ? task->display_name : task->function, {.actor_call = task->kind != proto::TaskKind::NORMAL});
  // Large values travel through the store, not inside the task's frame.
  MoveLargeArgumentsToStore(task->args);
  bool was_empty;
  {
    absl::MutexLock lock(&submit_mu_);
    was_empty = submissions_.empty();
    submissions_.push_back(std::move(task));
  }
  // One wake-up of the io thread per batch of submissions.
  if (was_empty && !PostToIo("worker.drain_submissions", [this] { DrainSubmissions(); })) {
    // Stopping: nothing will run it; its result fails instead of hanging.
    std::vector<std::unique_ptr<PendingTask>> dropped;
    {
      absl::MutexLock lock(&submit_mu_);
      dropped.swap(submissions_);
    }
    for (auto& t : dropped) {
      memory_store_->SetFailed(t->return_id, Failure{proto::FailureKind::OTHER, "",
                                            "the runtime is shutting down", ""});
    }
  }
}

void CoreWorker::DrainSubmissions() {
  io_checker_.Check("CoreWorker::DrainSubmissions");
  std::vector<std::unique_ptr<PendingTask>> batch;
  {
    absl::MutexLock lock(&submit_mu_);
    batch.swap(submissions_);
  }
  for (auto& task : batch) {
    if (task->kind == proto::TaskKind::ACTOR_CREATION) {
      owned_actors_[task->return_id] = std::move(task->actor_record);
    }
    if (task->kind == proto::TaskKind::ACTOR_METHOD) {
      // The actor submitter owns it from now on, in submission order.
      PendingTask* raw = task.get();
      ObjectId actor = raw->actor->id();
      std::string owner = raw->actor->owner_address();
      actor_submitter_->Submit(actor, owner, std::move(task));
      resolver_->Resolve(raw);
      continue;
    }
    // Owned by the resolver's callbacks until its arguments are ready.
    resolver_->Resolve(task.release());
  }
}

void CoreWorker::OnTaskResolved(PendingTask* raw) {
  TaskEvents().Record(TaskEventKind::kDependenciesReady, raw->task_id, raw->attempt, {}, {.actor_call = raw->kind != proto::TaskKind::NORMAL});
  if (raw->kind == proto::TaskKind::ACTOR_METHOD) {
    // Owned by the actor submitter; it goes out in submission order.
    raw->dep_failure = resolver_->FailedArgument(*raw);
    raw->resolved = true;
    actor_submitter_->OnCallResolved(raw->actor->id());
    return;
  }
  std::unique_ptr<PendingTask> task(raw);
  if (task->kind == proto::TaskKind::ACTOR_CREATION) {
    auto rit = owned_actors_.find(task->return_id);
    if (rit != owned_actors_.end()) StartActor(*rit->second);
    return;
  }
  // A failed argument fails the task with the same error (as in Ray).
  if (auto failed_argument = resolver_->FailedArgument(*task)) {
    tasks_->Fail(std::move(task), *std::move(failed_argument));
    return;
  }
  auto& slot = queues_[task->queue_key];
  if (!slot) {
    slot = std::make_unique<SchedulingQueue>();
    slot->key = task->queue_key;
    slot->shape.resources = task->resources;
    slot->shape.scheduling = task->scheduling;
    slot->shape.name = task->display_name;
  }
  slot->ready.push_back(std::move(task));
  DispatchQueue(*slot);
}

void CoreWorker::DispatchQueue(SchedulingQueue& queue) {
  io_checker_.Check("CoreWorker::DispatchQueue");
  // Pipelining several tasks per worker pays only for short tasks with a backlog;
  // otherwise one at a time, so a long task never holds up others behind it
  // while a CPU is free.
  bool pipeline = queue.avg_exec_micros >= 0 && queue.avg_exec_micros < 1000 &&
                  queue.ready.size() >= 32 && queue.ready.size() > 4 * queue.leases.size();
  int depth = pipeline ? options_.max_tasks_in_flight_per_worker : 1;
  while (!queue.ready.empty()) {
    Lease* best = nullptr;
    for (auto& lease : queue.leases) {
      if (lease->node_dead) continue;
      if (static_cast<int>(lease->in_flight.size()) >= depth) continue;
      if (lease->worker_blocked && !lease->in_flight.empty()) continue;
      if (best == nullptr || lease->in_flight.size() < best->in_flight.size()) best = lease.get();
    }
    if (best == nullptr) break;
    auto task = std::move(queue.ready.front());
    queue.ready.pop_front();
    PushTask(*best, task.release());
  }
  size_t wanted = std::min<size_t>(queue.ready.size(), options_.max_pending_lease_requests);
  while (static_cast<size_t>(queue.pending_lease_requests) < wanted) RequestLease(queue);
}

void CoreWorker::RequestLease(SchedulingQueue& queue) {
  if (!node_conn_ || node_conn_->closed()) {
    while (!queue.ready.empty()) {
      auto task = std::move(queue.ready.front());
      queue.ready.pop_front();
      tasks_->Fail(std::move(task), Failure{proto::FailureKind::OBJECT_LOST, "",
                                       "lost the connection to the node daemon", ""});
    }
    return;
  }
  ++queue.pending_lease_requests;
  SchedulingQueue* q = &queue;
  lease_requester_->Acquire(queue.shape, [this, q](proto::LeaseReply::Reader reply,
                                      std::shared_ptr<Connection> node) {
    OnLeaseReply(q, reply, std::move(node));
  });
}

void CoreWorker::OnLeaseReply(SchedulingQueue* queue, proto::LeaseReply::Reader reply,
                              std::shared_ptr<Connection> node) {
  --queue->pending_lease_requests;
  if (!reply.getGranted()) {
    // No node can ever run this shape: fail what waits for it.
    std::string why = reply.getError().cStr();
    while (!queue->ready.empty()) {
      auto task = std::move(queue->ready.front());
      queue->ready.pop_front();
      tasks_->Fail(std::move(task), Failure{proto::FailureKind::OTHER, "", why, ""});
    }
    MaybeDropQueueLater(queue->key);
    return;
  }
  auto lease = std::make_unique<Lease>();
  lease->lease_id = reply.getLeaseId();
  lease->worker_id = IdFrom<WorkerId>(reply.getWorkerId());
  lease->worker_pid = reply.getWorkerPid();
  lease->node = node;
  lease->node_id = IdFrom<NodeId>(reply.getNodeId());
  for (int id : reply.getGpuIds()) lease->gpu_ids.push_back(id);
  lease->queue = queue;
  std::string address = reply.getWorkerAddress().cStr();
  auto socket = ConnectToAddress(io_, address, options_.session_dir);
  if (!socket.ok()) {
    // The worker died between grant and connect; its node reclaims the lease.
    LUMEN_LOG(DEBUG) << "cannot reach leased worker at " << address << ": " << socket.status();
    SendLeaseEnd(node, lease->lease_id, /*kill=*/false);
    DispatchQueue(*queue);
    return;
  }
  lease->conn = Connection::Create(std::move(*socket));
  Lease* l = lease.get();
  lease->conn->Start(
      [this, l](Connection&, proto::Envelope::Reader msg) {
        if (msg.isTaskReply()) OnTaskReply(*l, msg.getTaskReply());
      },
      [this, l](Connection&, const absl::Status& why) {
        if (!stopped_) OnLeaseLost(l, why);
      });
  SendPeerHello(*lease->conn);
  queue->leases.push_back(std::move(lease));
  DispatchQueue(*queue);
  MaybeReturnLease(*l);
}

void CoreWorker::FillValue(proto::Value::Builder out, const ObjectEntry& entry) {
  switch (entry.kind) {
    case ObjectEntry::Kind::kInline:
      out.setInline(BytesOf(*entry.value));
      break;
    case ObjectEntry::Kind::kStored: {
      auto stored = out.initStored();
      stored.setSize(entry.stored_size);
      if (!entry.locations.empty()) {
        stored.setNodeId(DataOf(entry.locations.front().first));
        stored.setNodeAddress(entry.locations.front().second);
      }
      stored.setOwnerAddress(entry.owned ? listen_address_ : entry.owner_address);
      break;
    }
    case ObjectEntry::Kind::kFailed:
      FailureToProto(entry.failure, out.initError());
      break;
  }
}

void CoreWorker::FillTaskSpec(proto::TaskSpec::Builder spec, const PendingTask& task) {
  spec.setTaskId(DataOf(task.task_id));
  spec.setFunction(task.function);
  spec.setAttempt(task.attempt);
  spec.setOwnerAddress(listen_address_);
  spec.setKind(task.kind);
  if (task.actor) spec.setActorId(DataOf(task.actor->id()));
  auto args = spec.initArgs(task.args.size());
  ObjectTable::Locked objects(*object_table_);
  for (size_t i = 0; i < task.args.size(); ++i) {
    const auto& arg = task.args[i];
    if (!arg.ref) {
      args[i].setInline(BytesOf(arg.value));
      continue;
    }
    auto it = objects->find(arg.ref->id());
    if (it == objects->end()) {
      // Cannot happen while `arg.ref` holds it; fail the argument rather than crash.
      FailureToProto(Failure{proto::FailureKind::OBJECT_LOST, "lumen::ObjectLostError",
                             absl::StrCat("argument object ", arg.ref->id().Hex(),
                                          " is not in the reference table"),
                             ""},
                     args[i].initError());
      continue;
    }
    FillValue(args[i], it->second);
    if (it->second.kind == ObjectEntry::Kind::kStored) {
      args[i].getStored().setObjectId(DataOf(arg.ref->id()));
    }
  }
}

void CoreWorker::PushTask(Lease& lease, PendingTask* raw) {
  std::unique_ptr<PendingTask> task(raw);
  if (lease.idle_timer) lease.idle_timer->cancel();
  OutMessage out;
  auto spec = out.Init().initPushTask();
  FillTaskSpec(spec, *task);
  SetGpuIds(spec, lease.gpu_ids);
  TaskEvents().Record(TaskEventKind::kLeaseGranted, task->task_id, task->attempt, {}, {.node = lease.node_id, .worker = lease.worker_id, .worker_pid = lease.worker_pid});
  lease.conn->Send(out.builder());
  lease.in_flight.emplace(task->task_id, std::move(task));
}

void CoreWorker::OnTaskReply(Lease& lease, proto::TaskReply::Reader reply) {
  auto tid = reply.getTaskId();
  TaskId task_id =
      IdFrom<TaskId>(tid);
  auto it = lease.in_flight.find(task_id);
  if (it == lease.in_flight.end()) return;
  std::unique_ptr<PendingTask> task = std::move(it->second);
  lease.in_flight.erase(it);
  SchedulingQueue& queue = *lease.queue;
  if (reply.getRequeued()) {
    // Pipelined behind a task that now waits in Get: run it on another worker.
    lease.worker_blocked = true;
    queue.ready.push_back(std::move(task));
    DispatchQueue(queue);
    return;
  }
  if (lease.in_flight.empty()) lease.worker_blocked = false;
  double micros = static_cast<double>(reply.getExecMicros());
  queue.avg_exec_micros =
      queue.avg_exec_micros < 0 ? micros : 0.8 * queue.avg_exec_micros + 0.2 * micros;
  tasks_->Complete(*task, reply.getResult());
  task.reset();  // releases the argument refs
  DispatchQueue(queue);
  MaybeReturnLease(lease);
}

void CoreWorker::OnLeaseLost(Lease* lease, const absl::Status& why) {
  SchedulingQueue& queue = *lease->queue;
  std::unique_ptr<Lease> owned;
  for (auto it = queue.leases.begin(); it != queue.leases.end(); ++it) {
    if (it->get() == lease) {
      owned = std::move(*it);
      queue.leases.erase(it);
      break;
    }
  }
  if (!owned) return;
  if (owned->idle_timer) owned->idle_timer->cancel();
  // The worker may be alive but unreachable: its node ends it and frees the lease.
  SendLeaseEnd(owned->node, owned->lease_id, /*kill=*/true);
  std::vector<std::unique_ptr<PendingTask>> retry;
  auto failed = std::make_shared<std::vector<std::unique_ptr<PendingTask>>>();
  for (auto& [id, task] : owned->in_flight) {
    if (tasks_->ConsumeRetry(*task)) {
      LUMEN_LOG(INFO) << "worker pid " << owned->worker_pid << " died running " << task->display_name
                      << "; retrying (attempt " << task->attempt + 1 << ")";
      retry.push_back(std::move(task));
    } else {
      failed->push_back(std::move(task));
    }
  }
  for (auto it = retry.rbegin(); it != retry.rend(); ++it) queue.ready.push_front(std::move(*it));
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
            "the worker (pid ", pid, ") running task ", task->display_name, " on node ", node,
            " died: ", cause.empty() ? closed : cause, "; no retries left (max_retries=",
            task->max_retries, ")");
        tasks_->Fail(std::move(task), Failure{proto::FailureKind::WORKER_CRASHED, "", message, ""});
      }
      failed->clear();
    };
    if (owned->node_dead) {
      fail_all("");
    } else {
      AskWorkerExitCause(owned->node, owned->worker_id, std::move(fail_all));
    }
  }
  // Closing callbacks may still reference the connection; keep it until they ran.
  ReleaseLater(std::shared_ptr<Lease>(std::move(owned)));
  DispatchQueue(queue);
  MaybeDropQueueLater(queue.key);
}

void CoreWorker::MaybeReturnLease(Lease& lease) {
  if (!lease.in_flight.empty() || !lease.queue->ready.empty()) return;
  if (lease.return_when_idle) {
    ReturnLease(&lease);
    return;
  }
  // Keep an idle lease a little for the next task of its shape (a synchronous
  // loop then never waits for a lease), unless the node asks for it back.
  if (!lease.idle_timer) lease.idle_timer = std::make_unique<boost::asio::steady_timer>(io_);
  lease.idle_timer->expires_after(options_.timeouts.lease_idle_timeout);
  Lease* l = &lease;
  std::string key = lease.queue->key;
  uint64_t lease_id = lease.lease_id;
  lease.idle_timer->async_wait([this, l, key, lease_id](const boost::system::error_code& ec) {
    if (ec || stopped_) return;
    // The lease, and even its queue, may be gone by now: find them again.
    auto qit = queues_.find(key);
    if (qit == queues_.end()) return;
    SchedulingQueue* q = qit->second.get();
    for (auto& candidate : q->leases) {
      if (candidate.get() == l && candidate->lease_id == lease_id) {
        if (l->in_flight.empty() && q->ready.empty()) ReturnLease(l);
        return;
      }
    }
  });
}

void CoreWorker::ReturnLease(Lease* lease) {
  SchedulingQueue& queue = *lease->queue;
  for (auto it = queue.leases.begin(); it != queue.leases.end(); ++it) {
    if (it->get() != lease) continue;
    std::shared_ptr<Lease> owned(std::move(*it));
    queue.leases.erase(it);
    if (owned->idle_timer) owned->idle_timer->cancel();
    SendLeaseEnd(owned->node, owned->lease_id, /*kill=*/false);
    owned->conn->Close(absl::CancelledError("lease returned"));
    ReleaseLater(std::move(owned));  // close callbacks may still refer to it
    MaybeDropQueueLater(queue.key);
    return;
  }
}

void CoreWorker::MaybeDropQueueLater(const std::string& key) {
  // Posted: the caller may still hold the queue. A queue with no task, lease or
  // lease request left goes (a shape used once does not stay forever).
  PostToIo("worker.maybe_drop_queue", [this, key] {
    auto it = queues_.find(key);
    if (it == queues_.end()) return;
    const SchedulingQueue& q = *it->second;
    if (q.ready.empty() && q.leases.empty() && q.pending_lease_requests == 0) queues_.erase(it);
  });
}

void CoreWorker::OnReclaimLeases() {
  // Another request waits for resources our idle leases hold: give them back now,
  // and the busy ones as soon as they go idle.
  std::vector<Lease*> idle;
  for (auto& [key, queue] : queues_) {
    for (auto& lease : queue->leases) {
      lease->return_when_idle = true;
      if (lease->in_flight.empty() && queue->ready.empty()) idle.push_back(lease.get());
    }
  }
  for (Lease* lease : idle) ReturnLease(lease);
}

}  // namespace lumen::runtime
