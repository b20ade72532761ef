// CoreWorker, actors: the public entry points (create, call, kill, look up by
// name), and ActorHost, the runtime half of the owner-side actor manager
// (lumen/actors/actor_owner.h, which decides creation, restarts, kill and
// death): leases, links to actor processes, the head's name directory.
//
// Everything here but the public entry points runs on the io thread.
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "core/worker/actor_caller.h"
#include "core/worker/actor_host.h"
#include "core/worker/actor_names.h"
#include "core/worker/head_requester.h"
#include "core/worker/task_manager.h"
#include "core/worker/worker_state.h"
#include "lumen/common/codec.h"
#include "lumen/common/head_client.h"
#include "lumen/common/logging.h"
#include "lumen/common/proto_util.h"
#include "lumen/common/task_events.h"
#include "lumen/worker/api_error.h"
#include "lumen/worker/core_worker.h"

namespace lumen::runtime {

// ---------------------------------------------------------------------------
// Public entry points (any thread)

std::shared_ptr<internal::RefHandle> CoreWorker::CreateActor(
    std::string_view factory, std::vector<internal::TaskArgument> args,
    const internal::ActorOptions& options) {
  if (node_lost_) ThrowError(ErrorKind::kError, "lumen: lost the connection to the node daemon");
  ObjectId id = ObjectId::ForPut();
  if (!options.name.empty()) {
    if (options_.head_address.empty())
      ThrowError(ErrorKind::kError, "named actors need a cluster head");
    auto entry = CallHeadForActorName(
        options_.head_address,
        [&](proto::Envelope::Builder env) {
          FillActorName(env.initRegisterActorName(), options.name, id, listen_address_);
        },
        options_.timeouts.head_call_timeout);
    if (!entry.ok()) {
      // The head's own refusal is the message; a transport error names the call.
      if (IsHeadAnswer(entry.status()))
        ThrowError(ErrorKind::kError, std::string(entry.status().message()));
      ThrowError(ErrorKind::kError, absl::StrCat("cannot register actor name '", options.name,
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
  auto record = std::make_unique<ActorRecord>();
  record->id = id;
  record->factory = std::string(factory);
  record->name = options.name;
  record->detached = options.detached;
  record->max_restarts = options.max_restarts;
  record->max_task_retries = options.max_task_retries;
  record->args = std::move(args);
  record->resources = options.resources;
  record->placement = options.placement;
  record->scheduling = options.scheduling;
  record->max_concurrency = options.max_concurrency;
  task->actor_record = std::move(record);
  Enqueue(std::move(task));
  return handle;
}

std::shared_ptr<internal::RefHandle> CoreWorker::SubmitActorTask(
    const std::shared_ptr<internal::RefHandle>& actor, std::string_view method,
    std::vector<internal::TaskArgument> args) {
  if (node_lost_) ThrowError(ErrorKind::kError, "lumen: lost the connection to the node daemon");
  auto task = std::make_unique<PendingTask>();
  task->task_id = TaskId::Random();
  task->return_id = ObjectId::ForTaskReturn(task->task_id, 1);
  task->kind = proto::TaskKind::ACTOR_METHOD;
  task->function = std::string(method);
  task->actor = actor;
  task->args = std::move(args);
  auto handle = std::make_shared<internal::RefHandle>(task->return_id, shared_listen_address_);
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
      actor_owner_->Kill(id, no_restart, "killed by lumen::ActorHandle::Kill()");
      return;
    }
    // The owner decides (it may restart the actor); connecting to it does not
    // block the io thread (Timeouts::connect_timeout).
    connections_->WithPeer(owner, [this, id, no_restart](absl::StatusOr<std::shared_ptr<Connection>> conn) {
      if (conn.ok()) {
        SendKillActor(**conn, id, no_restart);
        return;
      }
      // The owner is gone; a detached actor is told directly, at the address
      // we use or the one the head recorded.
      if (auto channel = ActorChannelTo(id, "")) {
        SendKillActor(*channel, id, no_restart);
        return;
      }
      LookUpDetachedActor(id, [this, id, no_restart](std::string address) {
        auto unreachable = [id] {
          LUMEN_LOG(WARNING) << "cannot kill actor " << id.Hex().substr(0, 12)
                             << ": its owner and the actor are unreachable";
        };
        if (address.empty()) {
          unreachable();
          return;
        }
        connections_->WithPeer(address, [this, id, no_restart,
                           unreachable](absl::StatusOr<std::shared_ptr<Connection>> conn) {
          if (!conn.ok()) {
            unreachable();
            return;
          }
          SendKillActor(**conn, id, no_restart);
        });
      });
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
  if (options_.head_address.empty())
    ThrowError(ErrorKind::kError, "named actors need a cluster head");
  auto entry = CallHeadForActorName(
      options_.head_address,
      [&](proto::Envelope::Builder env) { env.setLookupActorName(name); },
      options_.timeouts.head_call_timeout);
  if (!entry.ok()) {
    if (entry.status().code() == absl::StatusCode::kInvalidArgument) {
      ThrowError(ErrorKind::kError, absl::StrCat("lumen::GetActor: ", entry.status().message()));
    }
    if (entry.status().code() == absl::StatusCode::kInternal) {
      ThrowError(ErrorKind::kError, std::string(entry.status().message()));
    }
    ThrowError(ErrorKind::kError,
               absl::StrCat("cannot look up actor '", name, "': ", entry.status().message()));
  }
  // Like a handle received inside a value: we borrow it from its owner.
  return std::make_shared<internal::RefHandle>(entry->actor_id, entry->owner_address,
                                               /*decoded=*/true);
}

// ---------------------------------------------------------------------------
// The owner's runtime half (io thread)

// A worker leased from the node daemon `node` for one incarnation.
class CoreWorker::ActorHost::NodeWorkerLease final : public actors::LeasedWorker {
 public:
  NodeWorkerLease(CoreWorker& core, std::shared_ptr<Connection> node, uint64_t lease_id,
                  WorkerId worker)
      : core_(core), node_(std::move(node)), lease_id_(lease_id), worker_(worker) {}

  void End(bool kill) override { core_.SendLeaseEnd(node_, lease_id_, kill); }
  bool NodeReachable() const override { return node_ && !node_->closed(); }
  void AskExitCause(std::function<void(std::string)> done) override {
    core_.AskWorkerExitCause(node_, worker_, std::move(done));
  }

 private:
  CoreWorker& core_;
  std::shared_ptr<Connection> node_;
  uint64_t lease_id_;
  WorkerId worker_;
};

// The owner's link to one actor process: connecting, then connected.
class CoreWorker::ActorHost::ProcessLink final : public actors::ActorProcess {
 public:
  // Shared with the connect callback and the connection's handlers, which may
  // outlive the link: `dropped` silences them.
  struct State {
    std::shared_ptr<Connection> conn;         // null while connecting
    std::optional<absl::Status> close_early;  // Close() while connecting
    bool dropped = false;
    // The connection as the actor's call channel may share it (actor_caller.h).
    std::shared_ptr<ActorCaller::SharedLink> shared = std::make_shared<ActorCaller::SharedLink>();
  };

  ProcessLink(CoreWorker& core, std::shared_ptr<State> state)
      : core_(core), state_(std::move(state)) {}
  ~ProcessLink() override {
    state_->dropped = true;
    // Possibly from inside its own handler: freed once that returned.
    if (state_->conn) core_.ReleaseLater(std::move(state_->conn));
    // Not shared as a call channel from now on (one already open keeps it).
    state_->shared->conn.reset();
  }
  void Close(const absl::Status& why) override {
    if (state_->conn) {
      state_->conn->Close(why);
    } else if (!state_->close_early) {
      state_->close_early = why;  // reported when the connect finishes
    }
  }

 private:
  CoreWorker& core_;
  std::shared_ptr<State> state_;
};

absl::Status CoreWorker::ActorHost::RequestWorker(const actors::ActorSpec& actor, int generation) {
  if (!core_.node_conn_ || core_.node_conn_->closed()) {
    return absl::UnavailableError("lost the connection to the node daemon");
  }
  const auto& record = static_cast<const ActorRecord&>(actor);
  LeaseShape shape;
  shape.resources = record.resources;
  shape.placement = record.placement;
  shape.actor = true;
  shape.detached = record.detached;
  shape.scheduling = record.scheduling;
  shape.name = absl::StrCat("actor ", record.factory);
  CoreWorker* core = &core_;
  ObjectId id = actor.id;
  core_.lease_requester_->Acquire(shape, [core, id, generation](proto::LeaseReply::Reader reply,
                                                                std::shared_ptr<Connection> node) {
    if (!reply.getGranted()) {
      core->actor_owner_->OnLeaseRefused(id, generation, reply.getError().cStr());
      return;
    }
    actors::WorkerPlacement where;
    where.node_id = IdFrom<NodeId>(reply.getNodeId());
    where.worker_id = IdFrom<WorkerId>(reply.getWorkerId());
    where.pid = reply.getWorkerPid();
    where.address = reply.getWorkerAddress().cStr();
    for (int gpu : reply.getGpuIds()) where.gpu_ids.push_back(gpu);
    auto lease = std::make_unique<NodeWorkerLease>(*core, std::move(node), reply.getLeaseId(),
                                                   where.worker_id);
    core->actor_owner_->OnLeaseGranted(id, generation, std::move(where), std::move(lease));
  });
  return absl::OkStatus();
}

std::unique_ptr<actors::ActorProcess> CoreWorker::ActorHost::StartProcess(
    const actors::ActorSpec& actor, int generation, const actors::WorkerPlacement& where,
    uint32_t attempt) {
  const auto& record = static_cast<const ActorRecord&>(actor);
  PendingTask creation;
  creation.task_id = TaskId::Random();
  creation.function = record.factory;
  creation.args = record.args;
  creation.kind = proto::TaskKind::ACTOR_CREATION;
  creation.attempt = attempt;
  OutMessage push;
  auto spec = push.Init().initPushTask();
  core_.FillTaskSpec(spec, creation);
  spec.setActorId(DataOf(actor.id));
  spec.setMaxConcurrency(static_cast<uint32_t>(std::max(1, record.max_concurrency)));
  spec.setActorName(record.name);
  SetGpuIds(spec, where.gpu_ids);
  TaskEvents().Record(TaskEventKind::kLeaseGranted, creation.task_id, creation.attempt, record.factory,
                      {.node = where.node_id, .worker = where.worker_id, .worker_pid = where.pid, .actor_call = true});
  std::string frames;
  AppendFrame(push.builder(), &frames);

  auto state = std::make_shared<ProcessLink::State>();
  CoreWorker* core = &core_;
  ObjectId id = actor.id;
  const TaskId creation_id = creation.task_id;
  AsyncConnectToAddress(
      core_.io_, where.address, core_.options_.session_dir,
      core_.options_.timeouts.connect_timeout,
      [core, state, id, generation, creation_id, address = where.address,
       frames = std::move(frames)](absl::StatusOr<Socket> socket) {
        if (state->dropped || core->stopped_) return;  // the socket closes with it
        if (!socket.ok()) {
          core->actor_owner_->OnProcessLost(id, generation, socket.status());
          return;
        }
        if (state->close_early) {
          core->actor_owner_->OnProcessLost(id, generation, *state->close_early);
          return;
        }
        state->conn = Connection::Create(std::move(*socket), RuntimePeerConnectionOptions());
        state->conn->Start(
            [core, state, id, generation, creation_id](Connection&,
                                                       proto::Envelope::Reader msg) {
              if (msg.isTaskReply() && IdFrom<TaskId>(msg.getTaskReply().getTaskId()) != creation_id) {
                // A call's reply: this connection is also the actor's call channel.
                if (!core->stopped_) core->OnActorTaskReply(id, msg.getTaskReply());
                return;
              }
              if (state->dropped) return;
              if (msg.isTaskReply()) {
                // No FINISHED carries the constructor's events: they are recorded here.
                RecordExecutionEvents(creation_id, /*actor_call=*/true, {}, NodeId(),
                                      msg.getTaskReply());
                auto result = msg.getTaskReply().getResult();
                std::optional<actors::TaskFailure> error;
                if (result.isError()) error = FailureFromProto(result.getError());
                core->actor_owner_->OnCreated(id, generation, error);
              } else if (msg.isActorExiting()) {
                core->actor_owner_->OnExiting(id, generation);
              }
            },
            [core, state, id, generation](Connection&, const absl::Status& why) {
              if (core->stopped_) return;
              core->actor_caller_->ForgetLink(id, state->shared.get());
              // Lost as a call channel too (before the process, as two
              // connections closing would have been reported).
              if (state->shared->channel != 0) core->OnActorChannelLost(id, state->shared->channel);
              if (state->dropped) return;
              core->actor_owner_->OnProcessLost(id, generation, why);
            });
        state->shared->conn = state->conn;
        state->shared->address = address;
        core->actor_caller_->AddLink(id, state->shared);
        OutboundConnections::SendPeerHello(*state->conn);
        state->conn->SendFramed(frames);
      });
  return std::make_unique<ProcessLink>(core_, std::move(state));
}

void CoreWorker::ActorHost::ReleaseCreation(actors::ActorSpec& actor) {
  static_cast<ActorRecord&>(actor).args.clear();  // releases the argument objects
}

void CoreWorker::ActorHost::RecordAddress(const actors::ActorSpec& actor,
                                          const std::string& address) {
  if (core_.options_.head_address.empty()) return;
  // Callers whose owner (this process) is gone find a detached actor through
  // the head. Asynchronous; Stop() waits for it (within the head deadline), so
  // that it is recorded before this process exits.
  core_.head_->Call(
      [name = actor.name, id = actor.id, address](proto::Envelope::Builder env) {
        FillActorName(env.initUpdateActorAddress(), name, id, "", address);
      },
      [name = actor.name](absl::StatusOr<proto::Envelope::Reader> reply) {
        if (!reply.ok()) {
          LUMEN_LOG(WARNING) << "cannot record the address of detached actor '" << name
                             << "' at the head: " << reply.status();
        }
      });
}

void CoreWorker::ActorHost::ReleaseName(const actors::ActorSpec& actor) {
  if (actor.name.empty() || core_.options_.head_address.empty()) return;
  core_.head_->Call(
      [name = actor.name, id = actor.id](proto::Envelope::Builder env) {
        FillActorName(env.initUnregisterActorName(), name, id);
      },
      [name = actor.name](absl::StatusOr<proto::Envelope::Reader> reply) {
        if (!reply.ok()) {
          LUMEN_LOG(WARNING) << "cannot free actor name '" << name << "': " << reply.status();
        }
      });
}

void CoreWorker::CreateActorOwner() {
  actor_host_ = std::make_unique<ActorHost>(*this);
  actor_owner_ = std::make_unique<actors::ActorOwner>(actors::ActorOwner::Runtime{
      .leaser = *actor_host_, .processes = *actor_host_, .names = *actor_host_});
}

std::vector<std::shared_ptr<Connection>> CoreWorker::OnActorNodeDead(const NodeId& node,
                                                                     const absl::Status& why) {
  std::vector<std::shared_ptr<Connection>> channels;
  for (const auto& [id, address] : actor_owner_->OnNodeDead(node, why)) {
    // Our own calls to it go to its next incarnation, not to a process the
    // cluster has given up on (which may linger a moment after its node).
    if (auto channel = ActorChannelTo(id, address)) channels.push_back(channel);
  }
  return channels;
}

}  // namespace lumen::runtime
