// CoreWorker: the owner service (waits, locations, borrowers, kills from
// peers; pushed tasks in a worker) and the connections to other owners.
// io thread.
#include "lumen/worker/core_worker.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <typeinfo>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "core/worker/actor_names.h"
#include "core/worker/head_requester.h"
#include "core/worker/borrower_registry.h"
#include "core/worker/worker_state.h"
#include "lumen/common/codec.h"
#include "lumen/common/failure_types.h"
#include "lumen/common/head_client.h"
#include "lumen/common/logging.h"
#include "lumen/common/process.h"
#include "lumen/common/proto_util.h"
#include "lumen/errors.h"
#include "lumen/objectstore/fd_passing.h"
#include "lumen/objectstore/object_table.h"

namespace lumen::runtime {

// ---------------------------------------------------------------------------
// Peers: borrowers asking for objects, owners pushing tasks (worker mode).

void CoreWorker::SendPeerHello(Connection& conn) {
  OutMessage out;
  InitHello(out.Init(), proto::Role::PEER);
  conn.Send(out.builder());
}

void CoreWorker::WithPeer(const std::string& address, ConnectionUse use) {
  io_checker_.Check("CoreWorker::WithPeer");
  WithConnection(connecting_peers_, peers_, address, std::move(use), &CoreWorker::AdoptPeer);
}

void CoreWorker::WithConnection(
    absl::flat_hash_map<std::string, std::vector<ConnectionUse>>& waiting,
    const absl::flat_hash_map<std::string, std::shared_ptr<Connection>>& open,
    const std::string& address, ConnectionUse use,
    std::shared_ptr<Connection> (CoreWorker::*adopt)(const std::string&, Socket)) {
  // Behind a connect in flight: wait in order (an escape before its removeBorrower).
  if (auto pending = waiting.find(address); pending != waiting.end()) {
    pending->second.push_back(std::move(use));
    return;
  }
  auto it = open.find(address);
  if (it != open.end() && !it->second->closed()) {
    use(it->second);
    return;
  }
  waiting[address].push_back(std::move(use));
  AsyncConnectToAddress(io_, address, options_.session_dir, options_.timeouts.connect_timeout,
                        [this, &waiting, &open, address, adopt](absl::StatusOr<Socket> socket) {
                          OnConnectEnded(waiting, open, address, std::move(socket), adopt);
                        });
}

void CoreWorker::OnConnectEnded(
    absl::flat_hash_map<std::string, std::vector<ConnectionUse>>& waiting,
    const absl::flat_hash_map<std::string, std::shared_ptr<Connection>>& open,
    const std::string& address, absl::StatusOr<Socket> socket,
    std::shared_ptr<Connection> (CoreWorker::*adopt)(const std::string&, Socket)) {
  auto entry = waiting.extract(address);
  if (entry.empty() || stopped_) return;  // shutting down: nothing is sent any more
  absl::StatusOr<std::shared_ptr<Connection>> conn;
  auto it = open.find(address);
  if (it != open.end() && !it->second->closed()) {
    conn = it->second;  // opened meanwhile; the new socket closes
  } else if (!socket.ok()) {
    conn = socket.status();
  } else {
    conn = (this->*adopt)(address, std::move(*socket));
  }
  for (auto& use : entry.mapped()) use(conn);
}

std::shared_ptr<Connection> CoreWorker::AdoptPeer(const std::string& address, Socket socket) {
  auto conn = Connection::Create(std::move(socket), RuntimePeerConnectionOptions());
  conn->Start([this](Connection& c, proto::Envelope::Reader m) { OnPeerFrame(c, m); },
              [this, address](Connection& c, const absl::Status& why) {
                peers_.erase(address);
                // Nothing will answer the requests sent on it: each callback
                // gets an empty envelope (read as "no answer").
                std::vector<std::function<void(proto::Envelope::Reader)>> unanswered;
                absl::erase_if(peer_requests_, [&](auto& entry) {
                  if (entry.second.conn_id != c.id()) return false;
                  unanswered.push_back(std::move(entry.second.callback));
                  return true;
                });
                capnp::MallocMessageBuilder empty;
                auto nothing = empty.initRoot<proto::Envelope>().asReader();
                for (auto& callback : unanswered) callback(nothing);
                if (stopped_) return;
                // The owner is gone: what we were waiting for from it is lost.
                std::vector<ObjectId> lost;
                {
                  ObjectTable::Locked objects(*object_table_);
                  for (auto& [id, e] : *objects) {
                    if (!e.owned && !e.ready && e.requested && e.owner_address == address) {
                      lost.push_back(id);
                    }
                  }
                }
                for (const auto& orphan : actor_submitter_->LocatingThrough(address)) {
                  OnActorOwnerUnreachable(orphan.actor, orphan.failed_address,
                                          absl::StrCat("the actor's owner at ", address,
                                                       " died: ", why.message()));
                }
                for (const auto& id : lost) {
                  memory_store_->SetFailed(id, Failure{proto::FailureKind::OBJECT_LOST,
                                              kOwnerDiedErrorType,
                                              absl::StrCat("the owner of object ", id.Hex(), " at ",
                                                           address, " died: ", why.message()),
                                              ""});
                }
              });
  SendPeerHello(*conn);
  peers_[address] = conn;
  return conn;
}

void CoreWorker::SendObjectStatus(Connection& conn, uint64_t request_id, const ObjectId& id) {
  OutMessage out;
  auto env = out.Init();
  env.setRequestId(request_id);
  auto value = env.initObjectStatus().initValue();
  {
    ObjectTable::Locked objects(*object_table_);
    auto it = objects->find(id);
    if (it == objects->end()) {
      FailureToProto(Failure{proto::FailureKind::OBJECT_LOST, "",
                             absl::StrCat("object ", id.Hex(),
                                          " was freed by its owner (no references left)"),
                             ""},
                     value.initError());
    } else {
      FillValue(value, it->second);
    }
  }
  conn.Send(out.builder());
}

void CoreWorker::SendRequeued(Connection& conn, const TaskId& task_id, uint32_t attempt) {
  OutMessage out;
  auto r = out.Init().initTaskReply();
  r.setTaskId(DataOf(task_id));
  r.setAttempt(attempt);
  r.setRequeued(true);
  conn.Send(out.builder());
}

void CoreWorker::OnPeerAccepted(Socket socket) {
  bool local = socket.local_endpoint().protocol().family() == AF_UNIX;
  auto conn = (local ? local_admission_ : admission_).Admit(std::move(socket), RuntimePeerConnectionOptions());
  if (!conn) return;
  inbound_[conn->id()] = conn;
  conn->context() = false;  // hello not seen yet
  conn->Start([this](Connection& c, proto::Envelope::Reader m) { OnPeerFrame(c, m); },
              [this](Connection& c, const absl::Status& why) {
                auto id = c.id();
                if (why.code() != absl::StatusCode::kUnavailable &&
                    why.code() != absl::StatusCode::kCancelled) {
                  LogRejectedConnection(options_.is_worker ? "worker" : "driver", c.peer(), why);
                }
                // A borrower that went away borrows nothing any more.
                for (const auto& [object, delta] : borrowers_->DropConnection(id)) {
                  refs_->ApplyBorrowerDelta(object, delta);
                }
                PostToIo("worker.forget_inbound_peer", [this, id] {
                  inbound_.erase(id);
                  parked_waits_.erase(id);
                });
              });
}

void CoreWorker::OnPeerFrame(Connection& conn, proto::Envelope::Reader msg) {
  io_checker_.Check("CoreWorker::OnPeerFrame");
  // An accepted connection (context: hello seen) speaks only after its hello.
  if (conn.context().has_value() && !std::any_cast<bool>(conn.context()) && !msg.isHello()) {
    conn.Close(absl::PermissionDeniedError("first frame was not a hello"));
    return;
  }
  switch (msg.which()) {
    case proto::Envelope::HELLO:
      if (msg.getHello().getProtocolVersion() != proto::PROTOCOL_VERSION) {
        conn.Close(absl::FailedPreconditionError("protocol version mismatch"));
        return;
      }
      if (!IsLoopbackHost(options_.node_host) &&
          !ConstantTimeEquals(std::string_view(msg.getHello().getToken().cStr(),
                                               msg.getHello().getToken().size()),
                              HeadToken())) {
        // Beyond loopback only holders of the cluster token may call us.
        conn.Close(absl::PermissionDeniedError("peer without the right cluster token"));
        return;
      }
      conn.context() = true;
      conn.AcceptHello();
      return;
    case proto::Envelope::ACTOR_STATE:
    case proto::Envelope::OBJECT_STATUS: {
      // Only on connections we opened (to an owner), never on accepted ones.
      if (conn.context().has_value()) return;
      auto it = peer_requests_.find(msg.getRequestId());
      if (it == peer_requests_.end()) return;
      auto cb = std::move(it->second.callback);
      peer_requests_.erase(it);
      cb(msg);
      return;
    }
    default:
      break;
  }
  auto* hello_seen = std::any_cast<bool>(&conn.context());
  if (hello_seen != nullptr && !*hello_seen) {
    conn.Close(absl::PermissionDeniedError("first frame was not a hello"));
    return;
  }
  switch (msg.which()) {
    case proto::Envelope::ADD_OBJECT_LOCATION: {
      auto location = msg.getAddObjectLocation();
      OnObjectLocationAdded(IdFrom<ObjectId>(location.getObjectId()),
                            IdFrom<NodeId>(location.getNodeId()),
                            location.getNodeAddress().cStr());
      return;
    }
    case proto::Envelope::WAIT_OBJECT: {
      auto data = msg.getWaitObject();
      AnswerWhenReady(conn, msg.getRequestId(), IdFrom<ObjectId>(data));
      return;
    }
    case proto::Envelope::RECOVER_OBJECT: {
      // A reader could not read our object there: forget that copy (rebuild
      // it when none is left), then answer as a wait.
      auto req = msg.getRecoverObject();
      ObjectId id = IdFrom<ObjectId>(req.getObjectId());
      OnCopyUnreadable(id, IdFrom<NodeId>(req.getNodeId()), req.getError().cStr());
      AnswerWhenReady(conn, msg.getRequestId(), id);
      return;
    }
    case proto::Envelope::WAIT_ACTOR: {
      auto req = msg.getWaitActor();
      auto data = req.getActorId();
      ObjectId id = IdFrom<ObjectId>(data);
      uint64_t request_id = msg.getRequestId();
      std::weak_ptr<Connection> weak = conn.shared_from_this();
      WhenActorSettled(id, req.getFailedAddress().cStr(),
                       [this, id, weak, request_id](bool alive, std::string address,
                                                    std::string death) {
                         auto c = weak.lock();
                         if (!c) return;
                         int retries = actor_owner_->MaxTaskRetries(id);
                         OutMessage out;
                         auto env = out.Init();
                         env.setRequestId(request_id);
                         auto state = env.initActorState();
                         state.setAlive(alive);
                         state.setAddress(address);
                         state.setDead(!alive);
                         state.setReason(death);
                         state.setMaxTaskRetries(retries);
                         c->Send(out.builder());
                       });
      return;
    }
    case proto::Envelope::KILL_ACTOR: {
      auto data = msg.getKillActor();
      ObjectId id = IdFrom<ObjectId>(data);
      if (actor_owner_->Owns(id)) {
        actor_owner_->Kill(id, msg.getRequestId() != 0, "killed by lumen::ActorHandle::Kill()");
      } else if (receiver_->is_actor() && id == actor_id_) {
        // Told directly (its owner is gone): free the name (without blocking
        // the io thread; the head call has a deadline) and end.
        auto exit_now = [this] {
          std::fflush(stdout);
          std::fflush(stderr);
          ::unlink(unix_path_.c_str());
          std::_Exit(0);
        };
        if (actor_name_.empty() || options_.head_address.empty()) exit_now();
        head_->Call(
            [name = actor_name_, id](proto::Envelope::Builder env) {
              FillActorName(env.initUnregisterActorName(), name, id);
            },
            [exit_now, name = actor_name_](absl::StatusOr<proto::Envelope::Reader> reply) {
              if (!reply.ok()) {
                LUMEN_LOG(WARNING) << "cannot free actor name '" << name << "': " << reply.status();
              }
              exit_now();
            });
      }
      return;
    }
    case proto::Envelope::ESCAPE_REF: {
      auto data = msg.getEscapeRef();
      ObjectId id = IdFrom<ObjectId>(data);
      refs_->OnEscapeRef(id);
      return;
    }
    case proto::Envelope::ADD_BORROWER:
    case proto::Envelope::REMOVE_BORROWER: {
      bool add = msg.isAddBorrower();
      auto data = add ? msg.getAddBorrower() : msg.getRemoveBorrower();
      OnBorrowerChange(conn.id(),
                       IdFrom<ObjectId>(data),
                       add ? 1 : -1);
      return;
    }
    case proto::Envelope::PUSH_TASK: {
      if (!options_.is_worker) {
        conn.Close(absl::FailedPreconditionError("a driver does not run tasks"));
        return;
      }
      auto spec = msg.getPushTask();
      auto task = std::make_unique<TaskToRun>();
      task->reply_to = conn.shared_from_this();
      auto tid = spec.getTaskId();
      task->task_id = IdFrom<TaskId>(tid);
      task->attempt = spec.getAttempt();
      task->function = spec.getFunction().cStr();
      task->kind = spec.getKind();
      task->max_concurrency = std::max<uint32_t>(1, spec.getMaxConcurrency());
      for (int id : spec.getGpuIds()) task->gpu_ids.push_back(id);
      if (task->kind == proto::TaskKind::ACTOR_CREATION) {
        // The connection the actor was created over is its owner's: tell it
        // when we exit on purpose.
        actor_owner_conn_ = conn.weak_from_this();
        auto aid = spec.getActorId();
        actor_id_ = IdFrom<ObjectId>(aid);
        actor_name_ = spec.getActorName().cStr();
        receiver_->BecomeActor();
      }
      for (auto arg : spec.getArgs()) {
        TaskToRun::Arg a;
        switch (arg.which()) {
          case proto::Value::INLINE: {
            auto d = arg.getInline();
            a.value.assign(reinterpret_cast<const char*>(d.begin()), d.size());
            break;
          }
          case proto::Value::STORED: {
            auto d = arg.getStored().getObjectId();
            a.is_stored = true;
            a.stored = IdFrom<ObjectId>(d);
            a.size = arg.getStored().getSize();
            a.node = IdFrom<NodeId>(arg.getStored().getNodeId());
            a.node_address = arg.getStored().getNodeAddress().cStr();
            a.owner = arg.getStored().getOwnerAddress().cStr();
            break;
          }
          case proto::Value::ERROR:
            break;
        }
        task->args.push_back(std::move(a));
      }
      // Queued for the executor; handed back while a plain worker's running
      // task blocks; dropped while an actor exits (its caller sees it die).
      if (auto back = receiver_->Receive(std::move(task))) {
        SendRequeued(conn, back->task_id, back->attempt);
      }
      return;
    }
    default:
      LUMEN_LOG(DEBUG) << "ignoring unexpected frame from a peer";
  }
}

// ---------------------------------------------------------------------------
// Borrowing: what the reference counter tells other owners, and what borrowers
// tell us.

void CoreWorker::SendEscapeRef(const ObjectId& id, const std::string& owner) {
  // A borrowed ref passed on: the owner pins it for the next reader. Sent on the
  // same connection as (and so before) our own removeBorrower.
  PostToIo("worker.send_escape_ref", [this, id, owner] {
    WithPeer(owner, [id](absl::StatusOr<std::shared_ptr<Connection>> conn) {
      if (!conn.ok()) return;  // the owner is gone; so is the object
      OutMessage out;
      out.Init().setEscapeRef(DataOf(id));
      (*conn)->Send(out.builder());
    });
  });
}

void CoreWorker::SendBorrowerChange(const ObjectId& id, const std::string& owner, bool add) {
  if (stopped_) return;
  PostToIo("worker.send_borrower_change", [this, id, owner, add] {
    WithPeer(owner, [id, add](absl::StatusOr<std::shared_ptr<Connection>> conn) {
      if (!conn.ok()) return;  // the owner is gone; so is the object
      OutMessage out;
      auto env = out.Init();
      capnp::Data::Reader data = DataOf(id);
      if (add) {
        env.setAddBorrower(data);
      } else {
        env.setRemoveBorrower(data);
      }
      (*conn)->Send(out.builder());
    });
  });
}

void CoreWorker::OnBorrowerChange(uint64_t conn_id, const ObjectId& id, int delta) {
  delta = borrowers_->Apply(conn_id, id, delta);
  if (delta != 0) refs_->ApplyBorrowerDelta(id, delta);
}

}  // namespace lumen::runtime
