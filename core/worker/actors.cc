// Actors in the core worker: the owner side (creation, restarts, the answer to
// "where is the actor?") and the caller side (ordered calls over a direct
// connection to the actor's process).
//
// Everything here but the public entry points runs on the io thread.
#include <unistd.h>

#include <thread>

#include "absl/strings/str_cat.h"
#include "lumen/worker/core_worker.h"
#include "core/worker/worker_state.h"
#include "lumen/common/head_client.h"
#include "lumen/common/codec.h"
#include "lumen/common/proto_util.h"
#include "lumen/common/logging.h"
#include "lumen/errors.h"

namespace lumen::runtime {
namespace {

// Unregisters a name at the head without blocking the io thread.
void UnregisterNameLater(std::string head, std::string name, ObjectId id) {
  if (head.empty() || name.empty()) return;
  std::thread([head, name, id] {
    (void)CallHead(head, [&](proto::Envelope::Builder env) {
      auto entry = env.initUnregisterActorName();
      entry.setName(name);
      entry.setActorId(DataOf(id));
    });
  }).detach();
}

}  // namespace

// ---------------------------------------------------------------------------
// Public entry points (any thread)

std::shared_ptr<internal::RefHandle> CoreWorker::CreateActor(
    std::string_view factory, std::vector<internal::TaskArgument> args,
    const internal::ActorOptions& options) {
  if (node_lost_) throw Error("lumen: lost the connection to the node daemon");
  ObjectId id = ObjectId::ForPut();
  if (!options.name.empty()) {
    if (options_.head_address.empty()) throw Error("named actors need a cluster head");
    auto reply = CallHead(options_.head_address, [&](proto::Envelope::Builder env) {
      auto entry = env.initRegisterActorName();
      entry.setName(options.name);
      entry.setActorId(DataOf(id));
      entry.setOwnerAddress(listen_address_);
    });
    if (!reply.ok()) {
      throw Error(absl::StrCat("cannot register actor name '", options.name,
                               "': ", reply.status().message()));
    }
    capnp::FlatArrayMessageReader reader(kj::arrayPtr(reply->data(), reply->size()));
    auto env = reader.getRoot<proto::Envelope>();
    if (!env.isActorNameReply() || !env.getActorNameReply().getOk()) {
      throw Error(env.isActorNameReply() ? env.getActorNameReply().getError().cStr()
                                         : "unexpected reply from the head");
    }
  }
  // The handle is an object the owner reference-counts like any other: the
  // actor ends when no handle is left anywhere.
  auto handle = std::make_shared<internal::RefHandle>(id, listen_address_);
  SetObjectReady(id, [](ObjectEntry& e) {
    e.is_actor = true;
    e.kind = ObjectEntry::Kind::kInline;
    e.value = std::make_shared<const std::string>(codec::EncodeValue<uint8_t>(0));
  });
  for (auto& arg : args) {
    // Large values go to the store once; the record keeps them for restarts.
    if (!arg.ref && arg.value.size() > options_.inline_limit) {
      arg.ref = PutEncoded(std::move(arg.value));
      arg.value.clear();
    }
  }
  auto task = std::make_unique<PendingTask>();
  task->task_id = TaskId::Random();
  task->return_id = id;
  task->kind = proto::TaskKind::ACTOR_CREATION;
  task->function = std::string(factory);
  task->args = args;
  task->actor_record = std::make_unique<ActorRecord>();
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
  PostToIo([this, id, owner, no_restart] {
    if (no_restart) {
      // Calls this process submits from now on fail at once.
      auto cit = actor_clients_.find(id);
      if (cit != actor_clients_.end() && !cit->second->dead) {
        cit->second->dead = true;
        cit->second->death = "killed by lumen::ActorHandle::Kill()";
      }
    }
    if (owner == listen_address_) {
      KillOwnedActor(id, no_restart, "killed by lumen::ActorHandle::Kill()");
      return;
    }
    absl::Status error;
    auto conn = PeerConnection(owner, &error);
    if (!conn) {
      // The owner is gone; a detached actor is told directly, at the address we
      // use or the one the head recorded.
      auto cit = actor_clients_.find(id);
      if (cit != actor_clients_.end() && cit->second->conn) {
        conn = cit->second->conn;
      } else if (std::string address = DetachedActorAddress(id); !address.empty()) {
        conn = PeerConnection(address, &error);
      }
      if (!conn) {
        LUMEN_LOG(WARNING) << "cannot kill actor " << id.Hex().substr(0, 12)
                           << ": its owner and the actor are unreachable";
        return;
      }
    }
    OutMessage out;
    auto env = out.Init();
    env.setRequestId(no_restart ? 1 : 0);
    env.setKillActor(DataOf(id));
    conn->Send(out.builder());
  });
}

std::shared_ptr<internal::RefHandle> CoreWorker::GetNamedActor(const std::string& name) {
  if (options_.head_address.empty()) throw Error("named actors need a cluster head");
  auto reply = CallHead(options_.head_address,
                        [&](proto::Envelope::Builder env) { env.setLookupActorName(name); });
  if (!reply.ok()) {
    throw Error(absl::StrCat("cannot look up actor '", name, "': ", reply.status().message()));
  }
  capnp::FlatArrayMessageReader reader(kj::arrayPtr(reply->data(), reply->size()));
  auto env = reader.getRoot<proto::Envelope>();
  if (!env.isActorNameReply()) throw Error("unexpected reply from the head");
  auto entry = env.getActorNameReply();
  if (!entry.getOk()) throw Error(absl::StrCat("lumen::GetActor: ", entry.getError().cStr()));
  // Like a handle received inside a value: we borrow it from its owner.
  return std::make_shared<internal::RefHandle>(IdFrom<ObjectId>(entry.getActorId()),
                                               entry.getOwnerAddress().cStr(), /*decoded=*/true);
}

// ---------------------------------------------------------------------------
// Owner side

void CoreWorker::StartActor(ActorRecord& record) {
  if (record.state == ActorRecord::State::kDead) return;
  int generation = ++record.generation;
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
  AcquireLease(shape, [this, id, generation](proto::LeaseReply::Reader reply,
                                             std::shared_ptr<Connection> node) {
    OnActorLease(id, generation, reply, std::move(node));
  });
}

void CoreWorker::OnActorLease(const ObjectId& id, int generation,
                              proto::LeaseReply::Reader reply, std::shared_ptr<Connection> node) {
  auto it = owned_actors_.find(id);
  ActorRecord* record = it == owned_actors_.end() ? nullptr : it->second.get();
  auto kill_lease = [this, node](uint64_t lease_id) { SendLeaseEnd(node, lease_id, true); };
  if (record == nullptr || record->generation != generation ||
      record->state == ActorRecord::State::kDead) {
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
  record->dying = false;
  record->address = reply.getWorkerAddress().cStr();
  record->gpu_ids.clear();
  for (int gpu : reply.getGpuIds()) record->gpu_ids.push_back(gpu);
  if (record->kill_requested) {
    kill_lease(record->lease_id);
    SetActorDead(*record, record->kill_reason);
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
          if (rit != owned_actors_.end() && rit->second->generation == generation) {
            rit->second->exiting = true;
          }
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
  creation.attempt = static_cast<uint32_t>(record->restarts);
  OutMessage push;
  auto spec = push.Init().initPushTask();
  FillTaskSpec(spec, creation);
  spec.setActorId(DataOf(id));
  spec.setMaxConcurrency(static_cast<uint32_t>(std::max(1, record->options.max_concurrency)));
  spec.setActorName(record->options.name);
  SetGpuIds(spec, record->gpu_ids);
  record->conn->Send(push.builder());
}

void CoreWorker::OnActorCreated(const ObjectId& id, int generation,
                                proto::TaskReply::Reader reply) {
  auto it = owned_actors_.find(id);
  if (it == owned_actors_.end() || it->second->generation != generation) return;
  ActorRecord& record = *it->second;
  if (record.state == ActorRecord::State::kDead) return;
  auto result = reply.getResult();
  if (result.isError()) {
    auto f = result.getError();
    std::string why = absl::StrCat("the actor's factory ", record.factory, " failed: ",
                                   f.getExceptionType().cStr(),
                                   f.getExceptionType().size() ? ": " : "", f.getMessage().cStr());
    record.kill_requested = true;
    record.kill_reason = why;
    SendLeaseEnd(record.lease_node, record.lease_id, /*kill=*/true);
    SetActorDead(record, why);
    return;
  }
  record.state = ActorRecord::State::kAlive;
  if (record.options.detached && !record.options.name.empty() && !options_.head_address.empty()) {
    // Callers whose owner (this process) is gone find a detached actor through
    // the head. Synchronous (one loopback round trip, once per actor), so that
    // it is recorded before this process may exit.
    (void)CallHead(options_.head_address, [&](proto::Envelope::Builder env) {
      auto entry = env.initUpdateActorAddress();
      entry.setName(record.options.name);
      entry.setActorId(DataOf(id));
      entry.setAddress(record.address);
    });
  }
  auto callbacks = std::move(record.on_change);
  record.on_change.clear();
  for (auto& cb : callbacks) cb();
}

void CoreWorker::OnActorProcessLost(const ObjectId& id, int generation, const absl::Status& why) {
  auto it = owned_actors_.find(id);
  if (it == owned_actors_.end() || it->second->generation != generation) return;
  ActorRecord& record = *it->second;
  if (record.state == ActorRecord::State::kDead || record.dying) return;
  // Make sure the process is gone and its resources are free.
  SendLeaseEnd(record.lease_node, record.lease_id, /*kill=*/true);
  std::shared_ptr<Connection> lease_node = std::move(record.lease_node);
  record.lease_id = 0;
  record.lease_node.reset();
  record.conn.reset();
  if (record.kill_requested) {
    SetActorDead(record, record.kill_reason);
  } else if (record.exiting) {
    SetActorDead(record, "the actor exited on purpose (lumen::ExitActor)");
  } else if (record.restarts < record.options.max_restarts) {
    ++record.restarts;
    LUMEN_LOG(INFO) << "actor " << id.Hex().substr(0, 12) << " died (" << why
                    << "); restart " << record.restarts << " of "
                    << record.options.max_restarts;
    record.state = ActorRecord::State::kRestarting;
    StartActor(record);
  } else {
    // Dead for good: first learn from its node daemon how the process ended
    // (its socket closes before the daemon reaps it), so the error says why.
    // Callers wait meanwhile as they would for a restart.
    record.dying = true;
    std::string closed(why.message());
    AskWorkerExitCause(lease_node, record.worker_id,
                       [this, id, generation, closed](std::string cause) {
                         auto rit = owned_actors_.find(id);
                         if (rit == owned_actors_.end() || rit->second->generation != generation) {
                           return;
                         }
                         ActorRecord& r = *rit->second;
                         r.dying = false;
                         if (r.state == ActorRecord::State::kDead) return;
                         if (r.kill_requested) {
                           SetActorDead(r, r.kill_reason);
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
                                                 ? absl::StrCat(" (after ", r.restarts, " restarts)")
                                                 : std::string()));
                       });
  }
}

void CoreWorker::SetActorDead(ActorRecord& record, std::string why) {
  if (record.state == ActorRecord::State::kDead) return;
  record.state = ActorRecord::State::kDead;
  record.death = std::move(why);
  record.args.clear();  // releases the argument objects
  UnregisterNameLater(options_.head_address, record.options.name, record.id);
  auto callbacks = std::move(record.on_change);
  record.on_change.clear();
  for (auto& cb : callbacks) cb();
}

void CoreWorker::OnActorOutOfScope(const ObjectId& id) {
  auto it = owned_actors_.find(id);
  if (it == owned_actors_.end() || it->second->options.detached) return;
  KillOwnedActor(id, true, "all handles to the actor went out of scope");
}

void CoreWorker::KillOwnedActor(const ObjectId& id, bool no_restart, std::string why) {
  auto it = owned_actors_.find(id);
  if (it == owned_actors_.end()) return;
  ActorRecord& record = *it->second;
  if (record.state == ActorRecord::State::kDead) return;
  if (no_restart) {
    record.kill_requested = true;
    record.kill_reason = std::move(why);
  }
  if (record.conn && record.lease_id != 0 && record.lease_node && !record.lease_node->closed()) {
    // The node kills the process; its connection closing finishes the job.
    SendLeaseEnd(record.lease_node, record.lease_id, /*kill=*/true);
  } else if (record.kill_requested) {
    SetActorDead(record, record.kill_reason);
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
  if (record.state == ActorRecord::State::kDead) {
    cb(false, "", record.death);
  } else if (record.state == ActorRecord::State::kAlive && !record.dying &&
             record.address != failed_address) {
    cb(true, record.address, "");
  } else {
    record.on_change.push_back([this, id, failed_address, cb = std::move(cb)]() mutable {
      WhenActorSettled(id, failed_address, std::move(cb));
    });
  }
}

// ---------------------------------------------------------------------------
// Caller side

CoreWorker::ActorClient& CoreWorker::GetActorClient(const ObjectId& id, const std::string& owner) {
  auto& slot = actor_clients_[id];
  if (!slot) {
    slot = std::make_unique<ActorClient>();
    slot->actor_id = id;
    slot->owner = owner;
  }
  return *slot;
}

void CoreWorker::PumpActorClient(ActorClient& client) {
  if (client.dead) {
    Failure failure{proto::FailureKind::ACTOR_DIED, "lumen::ActorDiedError",
                    absl::StrCat("the actor ", client.actor_id.Hex().substr(0, 12),
                                 " is dead: ", client.death),
                    ""};
    for (auto& task : client.interrupted) {
      // It was running when the actor died: say so, with the cause.
      Failure running = failure;
      running.message = absl::StrCat("the actor ", client.actor_id.Hex().substr(0, 12),
                                     " died while running ", task->function, ": ", client.death);
      FailTask(task.release(), running);
    }
    client.interrupted.clear();
    for (auto it = client.queue.begin(); it != client.queue.end();) {
      if ((*it)->resolved) {
        FailTask(it->release(), failure);
        it = client.queue.erase(it);
      } else {
        // Its arguments' callbacks still point at it: fail its result now and
        // free it when they have run (OnTaskResolved pumps again).
        SetObjectReady((*it)->return_id, [&](ObjectEntry& e) {
          e.kind = ObjectEntry::Kind::kFailed;
          e.failure = failure;
        });
        ++it;
      }
    }
    return;
  }
  if (!client.conn) {
    if (!client.resolving) ResolveActor(client);
    return;
  }
  while (!client.queue.empty() && client.queue.front()->resolved) {
    auto task = std::move(client.queue.front());
    client.queue.pop_front();
    if (task->dep_failure) {
      Failure failure = *task->dep_failure;
      FailTask(task.release(), failure);
      continue;
    }
    OutMessage out;
    FillTaskSpec(out.Init().initPushTask(), *task);
    client.conn->Send(out.builder());
    client.sent_order.push_back(task->task_id);
    client.in_flight.emplace(task->task_id, std::move(task));
  }
}

void CoreWorker::ResolveActor(ActorClient& client) {
  client.resolving = true;
  ObjectId id = client.actor_id;
  if (client.owner == listen_address_) {
    WhenActorSettled(id, client.failed_address,
                     [this, id](bool alive, std::string address, std::string death) {
                       auto rit = owned_actors_.find(id);
                       auto cit = actor_clients_.find(id);
                       if (cit != actor_clients_.end() && rit != owned_actors_.end()) {
                         cit->second->max_task_retries = rit->second->options.max_task_retries;
                       }
                       OnActorResolved(id, alive, std::move(address), std::move(death));
                     });
    return;
  }
  absl::Status error;
  auto conn = PeerConnection(client.owner, &error);
  if (!conn) {
    OnActorOwnerUnreachable(id, absl::StrCat("the actor's owner is unreachable: ",
                                             error.message()));
    return;
  }
  uint64_t request_id = next_request_id_++;
  peer_requests_[request_id] = [this, id](proto::Envelope::Reader msg) {
    if (!msg.isActorState()) return;
    auto state = msg.getActorState();
    auto cit = actor_clients_.find(id);
    if (cit != actor_clients_.end()) cit->second->max_task_retries = state.getMaxTaskRetries();
    OnActorResolved(id, state.getAlive(), state.getAddress().cStr(), state.getReason().cStr());
  };
  OutMessage out;
  auto env = out.Init();
  env.setRequestId(request_id);
  auto req = env.initWaitActor();
  req.setActorId(DataOf(id));
  req.setFailedAddress(client.failed_address);
  conn->Send(out.builder());
}

std::string CoreWorker::DetachedActorAddress(const ObjectId& id) {
  if (options_.head_address.empty()) return "";
  auto reply = CallHead(options_.head_address,
                        [&](proto::Envelope::Builder env) { env.setLookupActorById(DataOf(id)); });
  if (!reply.ok()) return "";
  try {
    capnp::FlatArrayMessageReader reader(kj::arrayPtr(reply->data(), reply->size()));
    auto env = reader.getRoot<proto::Envelope>();
    if (env.isActorNameReply() && env.getActorNameReply().getOk()) {
      return env.getActorNameReply().getAddress().cStr();
    }
  } catch (const std::exception&) {
  }
  return "";
}

void CoreWorker::OnActorOwnerUnreachable(const ObjectId& id, std::string why) {
  auto cit = actor_clients_.find(id);
  if (cit == actor_clients_.end()) return;
  // A detached actor outlives its owner: the head knows where it runs.
  std::string address = DetachedActorAddress(id);
  if (!address.empty() && address != cit->second->failed_address) {
    OnActorResolved(id, true, address, "");
    return;
  }
  OnActorResolved(id, false, "", std::move(why));
}

void CoreWorker::OnActorResolved(const ObjectId& id, bool alive, std::string address,
                                 std::string death) {
  auto cit = actor_clients_.find(id);
  if (cit == actor_clients_.end()) return;
  ActorClient& client = *cit->second;
  client.resolving = false;
  if (!alive) {
    client.dead = true;
    client.death = std::move(death);
    PumpActorClient(client);
    return;
  }
  auto socket = ConnectToAddress(io_, address, options_.session_dir);
  if (!socket.ok()) {
    // Gone already: ask again, for an address other than this one.
    client.failed_address = address;
    ResolveActor(client);
    return;
  }
  client.address = address;
  client.conn = Connection::Create(std::move(*socket));
  Connection* conn_ptr = client.conn.get();
  client.conn->Start(
      [this, id](Connection&, proto::Envelope::Reader msg) {
        if (msg.isTaskReply()) OnActorTaskReply(id, msg.getTaskReply());
      },
      [this, id, conn_ptr](Connection&, const absl::Status&) {
        if (!stopped_) OnActorConnectionLost(id, conn_ptr);
      });
  SendPeerHello(*client.conn);
  // Calls that were running when the previous incarnation died: retried first,
  // in their order, if the actor allows it; otherwise they fail.
  std::vector<std::unique_ptr<PendingTask>> interrupted = std::move(client.interrupted);
  client.interrupted.clear();
  for (auto rit = interrupted.rbegin(); rit != interrupted.rend(); ++rit) {
    auto& task = *rit;
    if (static_cast<int>(task->attempt) < client.max_task_retries) {
      ++task->attempt;
      task->resolved = true;
      client.queue.push_front(std::move(task));
    } else {
      FailTask(task.release(),
               Failure{proto::FailureKind::ACTOR_DIED, "lumen::ActorDiedError",
                       absl::StrCat("the actor ", id.Hex().substr(0, 12),
                                    " died while running this call and was restarted; the call "
                                    "was not retried (max_task_retries=",
                                    client.max_task_retries, ")"),
                       ""});
    }
  }
  PumpActorClient(client);
}

void CoreWorker::OnActorConnectionLost(const ObjectId& id, Connection* conn) {
  auto cit = actor_clients_.find(id);
  if (cit == actor_clients_.end()) return;
  ActorClient& client = *cit->second;
  if (client.conn.get() != conn) return;
  auto keep = client.conn;  // the connection is still on the stack
  PostToIo([keep] {});
  client.conn.reset();
  client.failed_address = client.address;
  for (const TaskId& task_id : client.sent_order) {
    auto it = client.in_flight.find(task_id);
    if (it == client.in_flight.end()) continue;
    client.interrupted.push_back(std::move(it->second));
    client.in_flight.erase(it);
  }
  client.sent_order.clear();
  if (!client.resolving) ResolveActor(client);
}

void CoreWorker::OnActorTaskReply(const ObjectId& id, proto::TaskReply::Reader reply) {
  auto cit = actor_clients_.find(id);
  if (cit == actor_clients_.end()) return;
  ActorClient& client = *cit->second;
  auto tid = reply.getTaskId();
  TaskId task_id =
      IdFrom<TaskId>(tid);
  auto it = client.in_flight.find(task_id);
  if (it == client.in_flight.end()) return;
  std::unique_ptr<PendingTask> task = std::move(it->second);
  client.in_flight.erase(it);
  while (!client.sent_order.empty() && !client.in_flight.contains(client.sent_order.front())) {
    client.sent_order.pop_front();
  }
  CompleteTask(task.get(), reply.getResult());
}

}  // namespace lumen::runtime
