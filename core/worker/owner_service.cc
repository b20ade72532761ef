// OwnerService: the listeners, hello admission and the frames other processes
// send to this owner (owner_service.h). io thread.
#include "core/worker/owner_service.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <any>
#include <cstdlib>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/worker/object_table.h"
#include "core/worker/object_value.h"
#include "core/worker/reference_counter.h"
#include "core/worker/task_receiver.h"
#include "lumen/actors/actor_owner.h"
#include "lumen/common/address.h"
#include "lumen/common/codec.h"
#include "lumen/common/head_client.h"
#include "lumen/common/logging.h"
#include "lumen/common/process.h"
#include "lumen/common/proto_util.h"
#include "lumen/common/unix_endpoint.h"

namespace lumen::runtime {

OwnerService::OwnerService(boost::asio::io_context& io, ObjectTable& objects,
                           ReferenceCounter& refs, TaskReceiver& receiver,
                           actors::ActorOwner& actor_owner, OwnerServiceHost& host,
                           Options options)
    : io_(io),
      objects_(objects),
      refs_(refs),
      receiver_(receiver),
      actor_owner_(actor_owner),
      host_(host),
      options_(std::move(options)) {}

absl::StatusOr<std::string> OwnerService::Listen() {
  // Peers push tasks here (worker) and ask for objects; over Unix from this
  // node, over TCP from others. In the abstract namespace ("@" + the path)
  // unless LUMEN_ABSTRACT_UNIX_SOCKETS=0: no inode is created on the
  // session's file system and none removed (~7% of a forked worker's CPU was
  // ext4's inode allocation for the file); the name still lies under the
  // session dir, which tells peers of this node to use it.
  const char* abstract = std::getenv("LUMEN_ABSTRACT_UNIX_SOCKETS");
  unix_path_ = absl::StrCat(abstract != nullptr && std::string_view(abstract) == "0" ? "" : "@",
                            options_.session_dir, "/sockets/",
                            options_.is_worker ? "worker-" : "driver-",
                            options_.worker_id.Hex().substr(0, 16), ".sock");
  if (unix_path_.front() != '@') ::unlink(unix_path_.c_str());
  boost::system::error_code ec;
  acceptor_ = std::make_unique<boost::asio::local::stream_protocol::acceptor>(io_);
  acceptor_->open(boost::asio::local::stream_protocol(), ec);
  if (!ec) SetCloseOnExec(acceptor_->native_handle());
  if (!ec) acceptor_->bind(UnixEndpoint(unix_path_), ec);
  if (!ec) acceptor_->listen(128, ec);
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", unix_path_, ": ", ec.message()));
  }
  auto tcp = ListenTcp(io_, options_.node_host, 0);
  if (!tcp.ok()) return tcp.status();
  tcp_acceptor_ = std::move(*tcp);
  address_ = FormatAddress(
      {absl::StrCat(options_.node_host, ":", tcp_acceptor_->local_endpoint().port()), unix_path_});
  AcceptUnix();
  AcceptTcp();
  return address_;
}

// The accept loops: each accepted socket goes to OnAccepted and the next
// accept starts; an accept error (EMFILE, ECONNABORTED, ...) retries after a
// short delay (AcceptRetry); only a closed acceptor (StopAccepting) ends the
// loop. The handlers hold only `this` (the io context and its handlers go
// before the service's owner).
void OwnerService::AcceptUnix() {
  acceptor_->async_accept(
      [this](const boost::system::error_code& ec, boost::asio::local::stream_protocol::socket s) {
        if (!unix_accept_retry_.Accepted(ec, acceptor_->is_open(), [this] { AcceptUnix(); })) {
          return;
        }
        int raw_fd = s.release();
        OnAccepted(Socket(io_, boost::asio::generic::stream_protocol(AF_UNIX, 0), raw_fd));
        AcceptUnix();
      });
}

void OwnerService::AcceptTcp() {
  tcp_acceptor_->async_accept(
      [this](const boost::system::error_code& ec, boost::asio::ip::tcp::socket s) {
        if (!tcp_accept_retry_.Accepted(ec, tcp_acceptor_->is_open(), [this] { AcceptTcp(); })) {
          return;
        }
        OnAccepted(AdoptTcp(io_, std::move(s)));
        AcceptTcp();
      });
}

void OwnerService::StopAccepting() {
  boost::system::error_code ignored;
  if (acceptor_) acceptor_->close(ignored);
  if (tcp_acceptor_) tcp_acceptor_->close(ignored);
  unix_accept_retry_.Stop();
  tcp_accept_retry_.Stop();
}

void OwnerService::CloseInbound() {
  auto inbound = inbound_;
  for (auto& [id, conn] : inbound) conn->Close(absl::CancelledError("shutdown"));
}

bool OwnerService::InboundFlushed() const {
  bool flushed = true;
  for (auto& [id, conn] : inbound_) flushed &= conn->closed() || conn->idle();
  return flushed;
}

void OwnerService::OnAccepted(Socket socket) {
  bool local = socket.local_endpoint().protocol().family() == AF_UNIX;
  auto conn = (local ? local_admission_ : admission_).Admit(std::move(socket), RuntimePeerConnectionOptions());
  if (!conn) return;
  inbound_[conn->id()] = conn;
  conn->context() = false;  // hello not seen yet
  conn->Start([this](Connection& c, proto::Envelope::Reader m) { OnFrame(c, m); },
              [this](Connection& c, const absl::Status& why) {
                auto id = c.id();
                if (why.code() != absl::StatusCode::kUnavailable &&
                    why.code() != absl::StatusCode::kCancelled) {
                  LogRejectedConnection(options_.is_worker ? "worker" : "driver", c.peer(), why);
                }
                // A borrower that went away borrows nothing any more.
                for (const auto& [object, delta] : borrowers_.DropConnection(id)) {
                  refs_.ApplyBorrowerDelta(object, delta);
                }
                host_.Post("worker.forget_inbound_peer", [this, id] {
                  inbound_.erase(id);
                  parked_waits_.erase(id);
                });
              });
}

void OwnerService::SendObjectStatus(Connection& conn, uint64_t request_id, const ObjectId& id) {
  OutMessage out;
  auto env = out.Init();
  env.setRequestId(request_id);
  auto value = env.initObjectStatus().initValue();
  {
    ObjectTable::Locked objects(objects_);
    auto it = objects->find(id);
    if (it == objects->end()) {
      FailureToProto(Failure{proto::FailureKind::OBJECT_LOST, "",
                             absl::StrCat("object ", id.Hex(),
                                          " was freed by its owner (no references left)"),
                             ""},
                     value.initError());
    } else {
      FillValue(value, it->second, address_);
    }
  }
  conn.Send(out.builder());
}

void OwnerService::SendRequeued(Connection& conn, const TaskId& task_id, uint32_t attempt) {
  OutMessage out;
  auto r = out.Init().initTaskReply();
  r.setTaskId(DataOf(task_id));
  r.setAttempt(attempt);
  r.setRequeued(true);
  conn.Send(out.builder());
}

void OwnerService::AnswerWhenReady(Connection& conn, uint64_t request_id, const ObjectId& id) {
  io_thread_.Check("OwnerService::AnswerWhenReady");
  bool ready = true;
  bool too_many = false;
  {
    ObjectTable::Locked objects(objects_);
    auto it = objects->find(id);
    if (it != objects->end() && !it->second.ready) {
      ready = false;
      // Each parked wait counts against its connection until it runs or
      // its object goes (the slot is released with the callback).
      auto& count = parked_waits_[conn.id()];
      if (!count) count = std::make_shared<std::atomic<size_t>>(0);
      if (count->load() >= kMaxParkedWaitsPerPeer ||
          parked_waits_total_->load() >= kMaxParkedWaits) {
        too_many = true;
      } else {
        // Counted per peer and in all (the callbacks of a peer that left
        // stay until their object is ready or freed).
        ++*count;
        ++*parked_waits_total_;
        std::shared_ptr<void> slot(nullptr, [count, total = parked_waits_total_](void*) {
          --*count;
          --*total;
        });
        std::weak_ptr<Connection> weak = conn.shared_from_this();
        it->second.on_ready.push_back([this, weak, request_id, id, slot] {
          if (auto c = weak.lock()) SendObjectStatus(*c, request_id, id);
        });
      }
    }
  }
  if (too_many) {
    conn.Close(absl::ResourceExhaustedError(absl::StrCat(
        "too many parked waits for objects (", kMaxParkedWaitsPerPeer, " per peer, ",
        kMaxParkedWaits, " in all)")));
    return;
  }
  if (ready) SendObjectStatus(conn, request_id, id);
}

void OwnerService::OnFrame(Connection& conn, proto::Envelope::Reader msg) {
  io_thread_.Check("OwnerService::OnFrame");
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
    case proto::Envelope::OBJECT_STATUS:
      // Replies: taken by the opener of a connection we opened; never sent
      // on an accepted one.
      return;
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
      host_.OnObjectLocationAdded(IdFrom<ObjectId>(location.getObjectId()),
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
      host_.OnCopyUnreadable(id, IdFrom<NodeId>(req.getNodeId()), req.getError().cStr());
      AnswerWhenReady(conn, msg.getRequestId(), id);
      return;
    }
    case proto::Envelope::WAIT_ACTOR: {
      auto req = msg.getWaitActor();
      auto data = req.getActorId();
      ObjectId id = IdFrom<ObjectId>(data);
      uint64_t request_id = msg.getRequestId();
      std::weak_ptr<Connection> weak = conn.shared_from_this();
      actor_owner_.WhenSettled(
          id, req.getFailedAddress().cStr(),
          [this, id, weak, request_id](actors::ActorLocation where) {
            auto c = weak.lock();
            if (!c) return;
            int retries = actor_owner_.MaxTaskRetries(id);
            OutMessage out;
            auto env = out.Init();
            env.setRequestId(request_id);
            auto state = env.initActorState();
            state.setAlive(where.alive);
            state.setAddress(where.address);
            state.setDead(!where.alive);
            state.setReason(where.death);
            state.setMaxTaskRetries(retries);
            c->Send(out.builder());
          });
      return;
    }
    case proto::Envelope::KILL_ACTOR: {
      auto data = msg.getKillActor();
      ObjectId id = IdFrom<ObjectId>(data);
      if (actor_owner_.Owns(id)) {
        actor_owner_.Kill(id, msg.getRequestId() != 0, "killed by lumen::ActorHandle::Kill()");
      } else {
        host_.OnKillUnowned(id);
      }
      return;
    }
    case proto::Envelope::ESCAPE_REF: {
      auto data = msg.getEscapeRef();
      refs_.OnEscapeRef(IdFrom<ObjectId>(data));
      return;
    }
    case proto::Envelope::ADD_BORROWER:
    case proto::Envelope::REMOVE_BORROWER: {
      bool add = msg.isAddBorrower();
      auto data = add ? msg.getAddBorrower() : msg.getRemoveBorrower();
      ObjectId id = IdFrom<ObjectId>(data);
      int delta = borrowers_.Apply(conn.id(), id, add ? 1 : -1);
      if (delta != 0) refs_.ApplyBorrowerDelta(id, delta);
      return;
    }
    case proto::Envelope::PUSH_TASK:
      if (!options_.is_worker) {
        conn.Close(absl::FailedPreconditionError("a driver does not run tasks"));
        return;
      }
      OnPushTask(conn, msg.getPushTask());
      return;
    default:
      LUMEN_LOG(DEBUG) << "ignoring unexpected frame from a peer";
  }
}

void OwnerService::OnPushTask(Connection& conn, proto::TaskSpec::Reader spec) {
  std::unique_ptr<TaskToRun> task = receiver_.NewTask();
  task->reply_to = conn.shared_from_this();
  auto tid = spec.getTaskId();
  task->task_id = IdFrom<TaskId>(tid);
  task->attempt = spec.getAttempt();
  task->function = spec.getFunction().cStr();
  task->kind = spec.getKind();
  task->max_concurrency = std::max<uint32_t>(1, spec.getMaxConcurrency());
  for (int id : spec.getGpuIds()) task->gpu_ids.push_back(id);
  if (task->kind == proto::TaskKind::ACTOR_CREATION) {
    // The connection the actor was created over is its owner's: told when
    // we exit on purpose.
    auto aid = spec.getActorId();
    host_.OnBecomeActor(conn, IdFrom<ObjectId>(aid), spec.getActorName().cStr());
    receiver_.BecomeActor();
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
  if (auto back = receiver_.Receive(std::move(task))) {
    SendRequeued(conn, back->task_id, back->attempt);
  }
}

}  // namespace lumen::runtime
