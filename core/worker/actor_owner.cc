// CoreWorker, actors: the public entry points (create, call, kill, look up by
// name) and the owner side — creation, restarts and death of the actors this
// process created, driven by their lifecycle state machine
// (lumen/actors/actor_lifecycle.h), and the answer to "where is it now?".
//
// Everything here but the public entry points runs on the io thread.
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "core/worker/actor_names.h"
#include "core/worker/head_requester.h"
#include "core/worker/worker_state.h"
#include "lumen/common/codec.h"
#include "lumen/common/head_client.h"
#include "lumen/common/logging.h"
#include "lumen/common/proto_util.h"
#include "lumen/common/task_events.h"
#include "lumen/errors.h"
#include "lumen/worker/core_worker.h"

namespace lumen::runtime {

// ---------------------------------------------------------------------------
// Public entry points (any thread)

std::shared_ptr<internal::RefHandle> CoreWorker::CreateActor(
    std::string_view factory, std::vector<internal::TaskArgument> args,
    const internal::ActorOptions& options) {
  if (node_lost_) throw Error("lumen: lost the connection to the node daemon");
  ObjectId id = ObjectId::ForPut();
  if (!options.name.empty()) {
    if (options_.head_address.empty()) throw Error("named actors need a cluster head");
    auto entry = CallHeadForActorName(
        options_.head_address,
        [&](proto::Envelope::Builder env) {
          FillActorName(env.initRegisterActorName(), options.name, id, listen_address_);
        },
        options_.timeouts.head_call_timeout);
    if (!entry.ok()) {
      // The head's own refusal is the message; a transport error names the call.
      if (IsHeadAnswer(entry.status())) throw Error(std::string(entry.status().message()));
      throw Error(absl::StrCat("cannot register actor name '", options.name,
                               "': ", entry.status().message()));
    }
  }
  // The handle is an object the owner reference-counts like any other: the
  // actor ends when no handle is left anywhere.
  auto handle = std::make_shared<internal::RefHandle>(id, listen_address_);
  memory_store_->SetReady(id, [](ObjectEntry& e) {
    e.is_actor = true;
    e.kind = ObjectEntry::Kind::kInline;
    e.value = std::make_shared<const std::string>(codec::EncodeValue<uint8_t>(0));
  });
  // Large values go to the store once; the record keeps them for restarts.
  MoveLargeArgumentsToStore(args);
  auto task = std::make_unique<PendingTask>();
  task->task_id = TaskId::Random();
  task->return_id = id;
  task->kind = proto::TaskKind::ACTOR_CREATION;
  task->function = std::string(factory);
  task->args = args;
  task->actor_record = std::make_unique<ActorRecord>(options.max_restarts);
  task->actor_record->id = id;
  task->actor_record->factory = std::string(factory);
  task->actor_record->args = std::move(args);
  task->actor_record->options = options;
  Enqueue(std::move(task));
  return handle;
}

std::shared_ptr<internal::RefHandle> CoreWorker::SubmitActorTask(
    const std::shared_ptr<internal::RefHandle>& actor, std::string_view method,
    std::vector<internal::TaskArgument> args) {
  if (node_lost_) throw Error("lumen: lost the connection to the node daemon");
  auto task = std::make_unique<PendingTask>();
  task->task_id = TaskId::Random();
  task->return_id = ObjectId::ForTaskReturn(task->task_id, 1);
  task->kind = proto::TaskKind::ACTOR_METHOD;
  task->function = std::string(method);
  task->actor = actor;
  task->args = std::move(args);
  auto handle = std::make_shared<internal::RefHandle>(task->return_id, listen_address_);
  Enqueue(std::move(task));
  return handle;
}

void CoreWorker::KillActor(const internal::RefHandle& actor, bool no_restart) {
  ObjectId id = actor.id();
  std::string owner = actor.owner_address();
  PostToIo("worker.kill_actor", [this, id, owner, no_restart] {
    if (no_restart) {
      // Calls this process submits from now on fail at once.
      actor_submitter_->MarkDead(id, "killed by lumen::ActorHandle::Kill()");
    }
    if (owner == listen_address_) {
      KillOwnedActor(id, no_restart, "killed by lumen::ActorHandle::Kill()");
      return;
    }
    absl::Status error;
    if (auto conn = PeerConnection(owner, &error)) {
      SendKillActor(*conn, id, no_restart);
      return;
    }
    // The owner is gone; a detached actor is told directly, at the address we
    // use or the one the head recorded.
    if (auto conn = ActorChannelTo(id, "")) {
      SendKillActor(*conn, id, no_restart);
      return;
    }
    LookUpDetachedActor(id, [this, id, no_restart](std::string address) {
      absl::Status error;
      auto conn = address.empty() ? nullptr : PeerConnection(address, &error);
      if (!conn) {
        LUMEN_LOG(WARNING) << "cannot kill actor " << id.Hex().substr(0, 12)
                           << ": its owner and the actor are unreachable";
        return;
      }
      SendKillActor(*conn, id, no_restart);
    });
  });
}

void CoreWorker::SendKillActor(Connection& conn, const ObjectId& id, bool no_restart) {
  OutMessage out;
  auto env = out.Init();
  env.setRequestId(no_restart ? 1 : 0);
  env.setKillActor(DataOf(id));
  conn.Send(out.builder());
}

std::shared_ptr<internal::RefHandle> CoreWorker::GetNamedActor(const std::string& name) {
  if (options_.head_address.empty()) throw Error("named actors need a cluster head");
  auto entry = CallHeadForActorName(
      options_.head_address,
      [&](proto::Envelope::Builder env) { env.setLookupActorName(name); },
      options_.timeouts.head_call_timeout);
  if (!entry.ok()) {
    if (entry.status().code() == absl::StatusCode::kInvalidArgument) {
      throw Error(absl::StrCat("lumen::GetActor: ", entry.status().message()));
    }
    if (entry.status().code() == absl::StatusCode::kInternal) {
      throw Error(std::string(entry.status().message()));
    }
    throw Error(absl::StrCat("cannot look up actor '", name, "': ", entry.status().message()));
  }
  // Like a handle received inside a value: we borrow it from its owner.
  return std::make_shared<internal::RefHandle>(entry->actor_id, entry->owner_address,
                                               /*decoded=*/true);
}

// ---------------------------------------------------------------------------
// Owner side

void CoreWorker::StartActor(ActorRecord& record) {
  io_checker_.Check("CoreWorker::StartActor");
  if (record.life.IsDead()) return;
  int generation = record.life.BeginIncarnation();
  if (!node_conn_ || node_conn_->closed()) {
    SetActorDead(record, "lost the connection to the node daemon");
    return;
  }
  ObjectId id = record.id;
  LeaseShape shape;
  shape.resources = record.options.resources;
  shape.placement = record.options.placement;
  shape.actor = true;
  shape.detached = record.options.detached;
  shape.scheduling = record.options.scheduling;
  shape.name = absl::StrCat("actor ", record.factory);
  lease_requester_->Acquire(shape, [this, id, generation](proto::LeaseReply::Reader reply,
                                             std::shared_ptr<Connection> node) {
    OnActorLease(id, generation, reply, std::move(node));
  });
}

void CoreWorker::OnActorLease(const ObjectId& id, int generation,
                              proto::LeaseReply::Reader reply, std::shared_ptr<Connection> node) {
  auto it = owned_actors_.find(id);
  ActorRecord* record = it == owned_actors_.end() ? nullptr : it->second.get();
  auto kill_lease = [this, node](uint64_t lease_id) { SendLeaseEnd(node, lease_id, true); };
  if (record == nullptr || !record->life.IsCurrent(generation) || record->life.IsDead()) {
    if (reply.getGranted()) kill_lease(reply.getLeaseId());
    return;
  }
  if (!reply.getGranted()) {
    SetActorDead(*record, absl::StrCat("cannot place the actor: ", reply.getError().cStr()));
    return;
  }
  record->lease_id = reply.getLeaseId();
  record->lease_node = node;
  record->node_id = IdFrom<NodeId>(reply.getNodeId());
  record->pid = reply.getWorkerPid();
  record->worker_id = IdFrom<WorkerId>(reply.getWorkerId());
  record->life.ClearDying();
  record->address = reply.getWorkerAddress().cStr();
  record->gpu_ids.clear();
  for (int gpu : reply.getGpuIds()) record->gpu_ids.push_back(gpu);
  if (record->life.kill_requested()) {
    kill_lease(record->lease_id);
    SetActorDead(*record, record->life.kill_reason());
    return;
  }
  auto socket = ConnectToAddress(io_, record->address, options_.session_dir);
  if (!socket.ok()) {
    OnActorProcessLost(id, generation, socket.status());
    return;
  }
  record->conn = Connection::Create(std::move(*socket));
  record->conn->Start(
      [this, id, generation](Connection&, proto::Envelope::Reader msg) {
        if (msg.isTaskReply()) {
          OnActorCreated(id, generation, msg.getTaskReply());
        } else if (msg.isActorExiting()) {
          auto rit = owned_actors_.find(id);
          if (rit != owned_actors_.end()) rit->second->life.OnExiting(generation);
        }
      },
      [this, id, generation](Connection&, const absl::Status& why) {
        if (!stopped_) OnActorProcessLost(id, generation, why);
      });
  SendPeerHello(*record->conn);
  PendingTask creation;
  creation.task_id = TaskId::Random();
  creation.function = record->factory;
  creation.args = record->args;
  creation.kind = proto::TaskKind::ACTOR_CREATION;
  creation.attempt = static_cast<uint32_t>(record->life.restarts());
  OutMessage push;
  auto spec = push.Init().initPushTask();
  FillTaskSpec(spec, creation);
  spec.setActorId(DataOf(id));
  spec.setMaxConcurrency(static_cast<uint32_t>(std::max(1, record->options.max_concurrency)));
  spec.setActorName(record->options.name);
  SetGpuIds(spec, record->gpu_ids);
  TaskEvents().Record(TaskEventKind::kLeaseGranted, creation.task_id, creation.attempt, record->factory, {.node = record->node_id, .worker = record->worker_id, .worker_pid = record->pid, .actor_call = true});
  record->conn->Send(push.builder());
}

void CoreWorker::OnActorCreated(const ObjectId& id, int generation,
                                proto::TaskReply::Reader reply) {
  auto it = owned_actors_.find(id);
  if (it == owned_actors_.end() || !it->second->life.IsCurrent(generation)) return;
  ActorRecord& record = *it->second;
  if (record.life.IsDead()) return;
  auto result = reply.getResult();
  if (result.isError()) {
    auto f = result.getError();
    std::string why = absl::StrCat("the actor's factory ", record.factory, " failed: ",
                                   f.getExceptionType().cStr(),
                                   f.getExceptionType().size() ? ": " : "", f.getMessage().cStr());
    record.life.RequestKill(/*no_restart=*/true, why);
    SendLeaseEnd(record.lease_node, record.lease_id, /*kill=*/true);
    SetActorDead(record, why);
    return;
  }
  record.life.OnCreated(generation);
  if (record.options.detached && !record.options.name.empty() && !options_.head_address.empty()) {
    // Callers whose owner (this process) is gone find a detached actor through
    // the head. Asynchronous; Stop() waits for it (within the head deadline),
    // so that it is recorded before this process exits.
    head_->Call(
        [name = record.options.name, id, address = record.address](proto::Envelope::Builder env) {
          FillActorName(env.initUpdateActorAddress(), name, id, "", address);
        },
        [name = record.options.name](absl::StatusOr<proto::Envelope::Reader> reply) {
          if (!reply.ok()) {
            LUMEN_LOG(WARNING) << "cannot record the address of detached actor '" << name
                               << "' at the head: " << reply.status();
          }
        });
  }
  auto callbacks = std::move(record.on_change);
  record.on_change.clear();
  for (auto& cb : callbacks) cb();
}

void CoreWorker::OnActorProcessLost(const ObjectId& id, int generation, const absl::Status& why) {
  auto it = owned_actors_.find(id);
  if (it == owned_actors_.end() || !it->second->life.IsCurrent(generation)) return;
  ActorRecord& record = *it->second;
  if (record.life.IsDead() || record.life.dying()) return;
  // Make sure the process is gone and its resources are free.
  SendLeaseEnd(record.lease_node, record.lease_id, /*kill=*/true);
  std::shared_ptr<Connection> lease_node = std::move(record.lease_node);
  record.lease_id = 0;
  record.lease_node.reset();
  record.conn.reset();
  actors::LossDecision decision = record.life.OnProcessLost(generation);
  switch (decision.action) {
    case actors::LossAction::kIgnore:
      return;
    case actors::LossAction::kDead:
      OnActorDead(record);
      return;
    case actors::LossAction::kRestart:
      LUMEN_LOG(INFO) << "actor " << id.Hex().substr(0, 12) << " died (" << why << "); restart "
                      << record.life.restarts() << " of " << record.options.max_restarts;
      StartActor(record);
      return;
    case actors::LossAction::kAskCause:
      break;
  }
  // Dead for good: first learn from its node daemon how the process ended
  // (its socket closes before the daemon reaps it), so the error says why.
  // Callers wait meanwhile as they would for a restart.
  std::string closed(why.message());
  AskWorkerExitCause(lease_node, record.worker_id,
                     [this, id, generation, closed](std::string cause) {
                       auto rit = owned_actors_.find(id);
                       if (rit == owned_actors_.end() || !rit->second->life.IsCurrent(generation)) {
                         return;
                       }
                       ActorRecord& r = *rit->second;
                       r.life.ClearDying();
                       if (r.life.IsDead()) return;
                       if (r.life.kill_requested()) {
                         SetActorDead(r, r.life.kill_reason());
                         return;
                       }
                       SetActorDead(r, absl::StrCat(
                                           "the actor's process (pid ", r.pid, ", actor ",
                                           r.options.name.empty()
                                               ? r.factory
                                               : absl::StrCat("'", r.options.name, "' (",
                                                              r.factory, ")"),
                                           ", on node ",
                                           r.node_id.IsNil() ? "?" : r.node_id.Hex().substr(0, 12),
                                           ") died unexpectedly: ",
                                           cause.empty() ? closed : cause,
                                           r.options.max_restarts > 0
                                               ? absl::StrCat(" (after ", r.life.restarts(),
                                                              " restarts)")
                                               : std::string()));
                     });
}

void CoreWorker::SetActorDead(ActorRecord& record, std::string why) {
  if (record.life.MarkDead(std::move(why))) OnActorDead(record);
}

void CoreWorker::OnActorDead(ActorRecord& record) {
  record.args.clear();  // releases the argument objects
  UnregisterActorName(record.options.name, record.id);
  auto callbacks = std::move(record.on_change);
  record.on_change.clear();
  for (auto& cb : callbacks) cb();
  if (record.out_of_scope) ForgetActorLater(record.id);
}

void CoreWorker::ForgetActorLater(const ObjectId& id) {
  // Callers still on the stack may hold the record: erase it from the loop.
  PostToIo("worker.forget_dead_actor", [this, id] {
    auto it = owned_actors_.find(id);
    if (it != owned_actors_.end() && it->second->life.IsDead() && it->second->out_of_scope) {
      owned_actors_.erase(it);
    }
  });
}

void CoreWorker::UnregisterActorName(const std::string& name, const ObjectId& id) {
  if (name.empty() || options_.head_address.empty()) return;
  head_->Call(
      [name, id](proto::Envelope::Builder env) {
        FillActorName(env.initUnregisterActorName(), name, id);
      },
      [name](absl::StatusOr<proto::Envelope::Reader> reply) {
        if (!reply.ok()) {
          LUMEN_LOG(WARNING) << "cannot free actor name '" << name << "': " << reply.status();
        }
      });
}

void CoreWorker::OnActorOutOfScope(const ObjectId& id) {
  auto it = owned_actors_.find(id);
  if (it == owned_actors_.end()) return;
  it->second->out_of_scope = true;
  if (it->second->life.IsDead()) {
    ForgetActorLater(id);
    return;
  }
  if (it->second->options.detached) return;
  KillOwnedActor(id, true, "all handles to the actor went out of scope");
}

void CoreWorker::KillOwnedActor(const ObjectId& id, bool no_restart, std::string why) {
  auto it = owned_actors_.find(id);
  if (it == owned_actors_.end()) return;
  ActorRecord& record = *it->second;
  if (record.life.IsDead()) return;
  record.life.RequestKill(no_restart, std::move(why));
  if (record.conn && record.lease_id != 0 && record.lease_node && !record.lease_node->closed()) {
    // The node kills the process; its connection closing finishes the job.
    SendLeaseEnd(record.lease_node, record.lease_id, /*kill=*/true);
  } else if (record.life.kill_requested()) {
    SetActorDead(record, record.life.kill_reason());
  }
}

void CoreWorker::WhenActorSettled(
    const ObjectId& id, const std::string& failed_address,
    std::function<void(bool alive, std::string address, std::string death)> cb) {
  auto it = owned_actors_.find(id);
  if (it == owned_actors_.end()) {
    cb(false, "", "the actor is unknown to its owner (it may have gone out of scope)");
    return;
  }
  ActorRecord& record = *it->second;
  if (record.life.IsDead()) {
    cb(false, "", record.life.death());
  } else if (record.life.Settled() && record.address != failed_address) {
    cb(true, record.address, "");
  } else {
    record.on_change.push_back([this, id, failed_address, cb = std::move(cb)]() mutable {
      WhenActorSettled(id, failed_address, std::move(cb));
    });
  }
}

}  // namespace lumen::runtime
