#include "core/runtime/core_worker.h"

#include "core/runtime/core_worker_internal.h"
#include "lumen/common/head_client.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <typeinfo>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "lumen/common/codec.h"
#include "lumen/common/proto_util.h"
#include "lumen/common/logging.h"
#include "lumen/common/process.h"
#include "lumen/errors.h"
#include "lumen/objectstore/fd_passing.h"
#include "lumen/objectstore/object_table.h"

namespace lumen::runtime {
namespace {

std::atomic<CoreWorker*> current_core_worker{nullptr};

}  // namespace

// Set on an executor thread while it runs a task: a Get there gives the CPU back.
thread_local bool in_task = false;

CoreWorker* CurrentCoreWorker() { return current_core_worker.load(std::memory_order_acquire); }
void SetCurrentCoreWorker(CoreWorker* worker) {
  current_core_worker.store(worker, std::memory_order_release);
}

CoreWorker::CoreWorker(CoreWorkerOptions options)
    : options_(std::move(options)), releaser_(std::make_shared<PinReleaser>()) {
  releaser_->core = this;
}

absl::StatusOr<std::unique_ptr<CoreWorker>> CoreWorker::Start(CoreWorkerOptions options) {
  std::unique_ptr<CoreWorker> worker(new CoreWorker(std::move(options)));
  if (worker->options_.worker_id.IsNil()) worker->options_.worker_id = WorkerId::Random();
  if (worker->options_.job_id.IsNil()) worker->options_.job_id = JobId::Random();
  if (auto s = worker->Connect(); !s.ok()) return s;
  return worker;
}

absl::Status CoreWorker::Connect() {
  exe_path_ = SelfExecutablePath();
  // The owner service: peers push tasks here (worker) and ask for objects;
  // over Unix from this node, over TCP from others.
  unix_path_ = absl::StrCat(options_.session_dir, "/sockets/",
                            options_.is_worker ? "worker-" : "driver-",
                            options_.worker_id.Hex().substr(0, 16), ".sock");
  ::unlink(unix_path_.c_str());
  boost::system::error_code ec;
  acceptor_ = std::make_unique<boost::asio::local::stream_protocol::acceptor>(io_);
  acceptor_->open(boost::asio::local::stream_protocol(), ec);
  if (!ec) acceptor_->bind(boost::asio::local::stream_protocol::endpoint(unix_path_), ec);
  if (!ec) acceptor_->listen(128, ec);
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", unix_path_, ": ", ec.message()));
  }
  auto tcp = ListenTcp(io_, options_.node_host, 0);
  if (!tcp.ok()) return tcp.status();
  tcp_acceptor_ = std::move(*tcp);
  listen_address_ = FormatAddress(
      {absl::StrCat(options_.node_host, ":", tcp_acceptor_->local_endpoint().port()), unix_path_});

  // Handshake with the node daemon (blocking): its reply carries the store's fd.
  boost::asio::local::stream_protocol::socket node_socket(io_);
  node_socket.connect(boost::asio::local::stream_protocol::endpoint(options_.node_socket), ec);
  if (ec) {
    return absl::UnavailableError(absl::StrCat("cannot connect to the node daemon at ",
                                               options_.node_socket, ": ", ec.message()));
  }
  {
    OutMessage out;
    auto hello =
        InitHello(out.Init(), options_.is_worker ? proto::Role::WORKER : proto::Role::DRIVER);
    hello.setWorkerId(DataOf(options_.worker_id));
    hello.setJobId(DataOf(options_.job_id));
    hello.setExePath(exe_path_);
    hello.setListenAddress(listen_address_);
    if (auto s = WriteFrameBlocking(node_socket.native_handle(), out.builder()); !s.ok()) return s;
  }
  std::vector<capnp::word> reply_words(512);
  size_t received = 0;
  auto fd = objectstore::RecvWithFd(node_socket.native_handle(), reply_words.data(),
                                    reply_words.size() * sizeof(capnp::word), &received);
  if (!fd.ok()) {
    // A refusal (e.g. a protocol version mismatch) comes without the store's fd:
    // show the daemon's reason when there is one.
    if (received > kFrameHeaderBytes) {
      try {
        capnp::FlatArrayMessageReader reader(kj::arrayPtr(
            reply_words.data() + 1, (received - kFrameHeaderBytes) / sizeof(capnp::word)));
        auto reply = reader.getRoot<proto::Envelope>();
        if (reply.isHelloReply() && !reply.getHelloReply().getOk()) {
          return absl::UnavailableError(absl::StrCat(
              "node daemon refused: ", reply.getHelloReply().getError().cStr()));
        }
      } catch (const std::exception&) {
      }
    }
    return absl::UnavailableError(
        absl::StrCat("node daemon handshake failed: ", fd.status().message()));
  }
  if (received < kFrameHeaderBytes) {
    ::close(*fd);
    return absl::UnavailableError("short handshake reply");
  }
  auto len = ParseFrameHeader(reinterpret_cast<const uint8_t*>(reply_words.data()), 1 << 20);
  if (!len.ok() || kFrameHeaderBytes + *len != received) {
    ::close(*fd);
    return absl::UnavailableError("malformed handshake reply from the node daemon");
  }
  uint64_t store_size = 0;
  try {
    capnp::FlatArrayMessageReader reader(
        kj::arrayPtr(reply_words.data() + 1, *len / sizeof(capnp::word)));
    auto reply = reader.getRoot<proto::Envelope>();
    if (!reply.isHelloReply()) throw std::runtime_error("expected a hello reply");
    auto hr = reply.getHelloReply();
    if (!hr.getOk()) {
      ::close(*fd);
      return absl::UnavailableError(absl::StrCat("node daemon refused: ", hr.getError().cStr()));
    }
    auto nid = hr.getNodeId();
    node_id_ = IdFrom<NodeId>(nid);
    store_size = hr.getStoreSize();
    node_address_ = hr.getNodeAddress().cStr();
  } catch (const std::exception& e) {
    ::close(*fd);
    return absl::UnavailableError(absl::StrCat("bad handshake reply: ", e.what()));
  }
  auto segment = objectstore::ShmSegment::Attach(*fd, store_size);
  if (!segment.ok()) return segment.status();
  store_ = std::move(*segment);

  int raw = node_socket.release();
  Socket generic(io_, boost::asio::generic::stream_protocol(AF_UNIX, 0), raw);
  node_conn_ = Connection::Create(std::move(generic));
  node_conn_->Start([this](Connection& c, proto::Envelope::Reader m) { OnNodeFrame(c, m); },
                    [this](Connection&, const absl::Status& why) { OnNodeLost(why); });

  auto accept_next = std::make_shared<std::function<void()>>();
  *accept_next = [this, accept_next]() {
    acceptor_->async_accept([this, accept_next](const boost::system::error_code& ec,
                                                boost::asio::local::stream_protocol::socket s) {
      if (ec) return;  // acceptor closed
      int raw_fd = s.release();
      OnPeerAccepted(Socket(io_, boost::asio::generic::stream_protocol(AF_UNIX, 0), raw_fd));
      (*accept_next)();
    });
  };
  (*accept_next)();
  auto accept_tcp = std::make_shared<std::function<void()>>();
  *accept_tcp = [this, accept_tcp]() {
    tcp_acceptor_->async_accept(
        [this, accept_tcp](const boost::system::error_code& ec, boost::asio::ip::tcp::socket s) {
          if (ec) return;  // acceptor closed
          OnPeerAccepted(AdoptTcp(io_, std::move(s)));
          (*accept_tcp)();
        });
  };
  (*accept_tcp)();

  work_.emplace(io_.get_executor());
  io_thread_ = std::thread([this] {
    logging::SetProcessTag(options_.is_worker ? "worker" : "driver");
    io_.run();
  });
  return absl::OkStatus();
}

void CoreWorker::OnNodeLost(const absl::Status& why) {
  node_lost_ = true;
  if (!stopped_) LUMEN_LOG(DEBUG) << "lost the node daemon: " << why;
  // Answer every pending request with an empty envelope (read as an error).
  auto pending = std::move(node_requests_);
  node_requests_.clear();
  capnp::MallocMessageBuilder empty;
  auto reader = empty.initRoot<proto::Envelope>().asReader();
  for (auto& [id, request] : pending) request.callback(reader);
  // Nothing will arrive any more: fail whatever is still pending.
  std::vector<ObjectId> waiting;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [id, entry] : objects_)
      if (!entry.ready) waiting.push_back(id);
  }
  for (const auto& id : waiting) {
    SetObjectReady(id, [&](ObjectEntry& e) {
      e.kind = ObjectEntry::Kind::kFailed;
      e.failure = Failure{proto::FailureKind::OBJECT_LOST, "",
                          "lost the connection to the node daemon", ""};
    });
  }
  exec_mu_.Lock();
  exec_queue_size_.fetch_add(0);
  exec_mu_.Unlock();
}

CoreWorker::~CoreWorker() { Stop(); }

void CoreWorker::Stop() {
  if (stopped_.exchange(true)) return;
  {
    absl::MutexLock lock(&releaser_->mu);
    releaser_->core = nullptr;
  }
  std::vector<std::pair<std::string, ObjectId>> names;
  boost::asio::post(io_, [this, &names] {
    for (auto& [id, record] : owned_actors_) {
      if (!record->options.name.empty() && !record->options.detached &&
          record->state != ActorRecord::State::kDead) {
        names.emplace_back(record->options.name, id);
      }
    }
    boost::system::error_code ignored;
    if (acceptor_) acceptor_->close(ignored);
    if (tcp_acceptor_) tcp_acceptor_->close(ignored);
    auto remotes = remote_nodes_;  // closing erases from remote_nodes_
    for (auto& [address, conn] : remotes) conn->Close(absl::CancelledError("shutdown"));
    if (node_conn_) node_conn_->Close(absl::CancelledError("shutdown"));
    for (auto& [key, queue] : queues_) {
      for (auto& lease : queue->leases) {
        if (lease->idle_timer) lease->idle_timer->cancel();
        if (lease->conn) lease->conn->Close(absl::CancelledError("shutdown"));
      }
    }
    auto peers = peers_;  // closing erases from peers_
    for (auto& [addr, conn] : peers) conn->Close(absl::CancelledError("shutdown"));
    auto inbound = inbound_;
    for (auto& [id, conn] : inbound) conn->Close(absl::CancelledError("shutdown"));
    work_.reset();
    io_.stop();
  });
  if (io_thread_.joinable()) io_thread_.join();
  ::unlink(unix_path_.c_str());
  // Our actors (but detached ones) end with us: free their names.
  for (const auto& [name, id] : names) {
    (void)CallHead(options_.head_address, [&](proto::Envelope::Builder env) {
      auto entry = env.initUnregisterActorName();
      entry.setName(name);
      entry.setActorId(DataOf(id));
    });
  }
  // Drop queued work (its refs) while the maps are still consistent.
  queues_.clear();
  {
    absl::MutexLock lock(&submit_mu_);
    submissions_.clear();
  }
}

void CoreWorker::PostToIo(std::function<void()> fn) { boost::asio::post(io_, std::move(fn)); }

// ---------------------------------------------------------------------------
// Reference table

void CoreWorker::AddLocalRef(const ObjectId& id, const std::string& owner, bool decoded) {
  bool register_borrower = false;
  {
    absl::MutexLock lock(&mu_);
    auto [it, inserted] = objects_.try_emplace(id);
    ObjectEntry& e = it->second;
    if (inserted) {
      e.owned = owner == listen_address_;
      e.owner_address = owner;
    }
    ++e.local_refs;
    if (decoded && inserted && e.owned) {
      // Our own object, already freed: nothing will ever fill it.
      e.kind = ObjectEntry::Kind::kFailed;
      e.failure = Failure{proto::FailureKind::OBJECT_LOST, "",
                          absl::StrCat("object ", id.Hex(),
                                       " was freed by its owner before this reference to it "
                                       "was read"),
                          ""};
      e.ready.store(true, std::memory_order_release);
    }
    if (decoded) {
      if (e.owned) {
        if (e.pending_escapes > 0) --e.pending_escapes;
      } else if (!e.registered_borrower) {
        e.registered_borrower = register_borrower = true;
      }
    }
  }
  if (register_borrower) SendBorrowerChange(id, owner, true);
}

void CoreWorker::RemoveLocalRef(const ObjectId& id) {
  std::string owner;
  {
    absl::MutexLock lock(&mu_);
    auto it = objects_.find(id);
    if (it == objects_.end()) return;
    --it->second.local_refs;
    if (it->second.local_refs == 0 && it->second.registered_borrower) {
      it->second.registered_borrower = false;
      owner = it->second.owner_address;
    }
    MaybeFreeLocked(it);
  }
  if (!owner.empty()) SendBorrowerChange(id, owner, false);
}

void CoreWorker::MarkEscaped(const ObjectId& id) {
  std::string owner;
  {
    absl::MutexLock lock(&mu_);
    auto it = objects_.find(id);
    if (it == objects_.end()) return;
    if (it->second.owned) {
      ++it->second.pending_escapes;
      return;
    }
    owner = it->second.owner_address;
  }
  // A borrowed ref passed on: the owner pins it for the next reader. Sent on the
  // same connection as (and so before) our own removeBorrower.
  PostToIo([this, id, owner] {
    absl::Status error;
    auto conn = PeerConnection(owner, &error);
    if (!conn) return;
    OutMessage out;
    out.Init().setEscapeRef(DataOf(id));
    conn->Send(out.builder());
  });
}

void CoreWorker::SendBorrowerChange(const ObjectId& id, const std::string& owner, bool add) {
  if (stopped_) return;
  PostToIo([this, id, owner, add] {
    absl::Status error;
    auto conn = PeerConnection(owner, &error);
    if (!conn) return;  // the owner is gone; so is the object
    OutMessage out;
    auto env = out.Init();
    capnp::Data::Reader data(id.data(), ObjectId::kSize);
    if (add) {
      env.setAddBorrower(data);
    } else {
      env.setRemoveBorrower(data);
    }
    conn->Send(out.builder());
  });
}

void CoreWorker::OnBorrowerChange(uint64_t conn_id, const ObjectId& id, int delta) {
  auto& counts = borrowed_by_[conn_id];
  if (delta < 0) {
    auto cit = counts.find(id);
    if (cit == counts.end()) return;  // never registered through this connection
    delta = -std::min(-delta, cit->second);
    cit->second += delta;
    if (cit->second == 0) counts.erase(cit);
  } else {
    ++counts[id];
  }
  if (counts.empty()) borrowed_by_.erase(conn_id);
  absl::MutexLock lock(&mu_);
  auto it = objects_.find(id);
  if (it == objects_.end() || !it->second.owned) return;
  ObjectEntry& e = it->second;
  if (delta > 0) {
    e.borrowers += delta;
    e.pending_escapes = std::max(0, e.pending_escapes - delta);
  } else {
    e.borrowers = std::max(0, e.borrowers + delta);
    MaybeFreeLocked(it);
  }
}

void CoreWorker::MaybeFreeLocked(absl::node_hash_map<ObjectId, ObjectEntry>::iterator it) {
  ObjectEntry& entry = it->second;
  if (entry.local_refs > 0 || entry.pending_escapes > 0 || entry.borrowers > 0 ||
      !entry.on_ready.empty()) {
    return;
  }
  if (entry.owned && entry.ready && entry.kind == ObjectEntry::Kind::kStored) {
    ObjectId id = it->first;
    std::vector<std::string> addresses;
    for (const auto& [node, address] : entry.locations) addresses.push_back(address);
    DeleteCopies(id, std::move(addresses));
  }
  if (entry.owned && entry.is_actor && !stopped_) {
    // No handle to the actor is left anywhere: it ends (unless detached).
    ObjectId id = it->first;
    PostToIo([this, id] { OnActorOutOfScope(id); });
  }
  objects_.erase(it);
}

namespace {
// Steps taken by Get/Wait waiters: refs scanned when registering, countdowns,
// entries visited when unregistering (internal::AwaitStepsForTesting).
std::atomic<uint64_t> await_steps{0};
}  // namespace

}  // namespace lumen::runtime

namespace lumen::internal {
uint64_t AwaitStepsForTesting() {
  return runtime::await_steps.load(std::memory_order_relaxed);
}
}  // namespace lumen::internal

namespace lumen::runtime {

void CoreWorker::WakeWaitersLocked(ObjectEntry& entry) {
  if (entry.waiters.empty()) return;
  await_steps.fetch_add(entry.waiters.size(), std::memory_order_relaxed);
  for (Waiter* waiter : entry.waiters) {
    // A Wait already satisfied stays registered until its thread unregisters.
    if (waiter->remaining > 0 && --waiter->remaining == 0) waiter->done.Notify();
  }
  std::vector<Waiter*>().swap(entry.waiters);
}

void CoreWorker::SetObjectReady(const ObjectId& id, std::function<void(ObjectEntry&)> fill,
                                bool owned_result) {
  std::vector<std::function<void()>> callbacks;
  bool orphan_stored = false;
  std::vector<std::string> orphan_locations;
  {
    absl::MutexLock lock(&mu_);
    auto it = objects_.find(id);
    if (it == objects_.end()) {
      // Nobody holds a reference any more: drop the value, and the store copy
      // when it is a result this process owns (never a borrowed object).
      ObjectEntry scratch;
      fill(scratch);
      orphan_stored = owned_result && scratch.kind == ObjectEntry::Kind::kStored;
      for (const auto& [node, address] : scratch.locations) orphan_locations.push_back(address);
    } else if (!it->second.ready) {
      fill(it->second);
      it->second.ready.store(true, std::memory_order_release);
      callbacks.swap(it->second.on_ready);
      WakeWaitersLocked(it->second);
    }
  }
  if (orphan_stored) DeleteCopies(id, std::move(orphan_locations));
  if (!callbacks.empty()) {
    PostToIo([this, id, callbacks = std::move(callbacks)] {
      for (auto& cb : callbacks) cb();
      absl::MutexLock lock(&mu_);
      auto it = objects_.find(id);
      if (it != objects_.end()) MaybeFreeLocked(it);
    });
  }
}

// ---------------------------------------------------------------------------
// Node daemon requests

void CoreWorker::SendToNode(std::function<void(proto::Envelope::Builder)> fill) {
  PostToIo([this, fill = std::move(fill)] {
    if (!node_conn_ || node_conn_->closed()) return;
    OutMessage out;
    fill(out.Init());
    node_conn_->Send(out.builder());
  });
}

CoreWorker::StoreResult CoreWorker::CallStore(int op, const ObjectId& id, uint64_t size) {
  return CallNode([op, id, size](proto::Envelope::Builder env) {
    proto::StoreRequest::Builder req = [&]() {
      switch (op) {
        case kCreate: return env.initStoreCreate();
        case kSeal: return env.initStoreSeal();
        case kAbort: return env.initStoreAbort();
        default: return env.initStoreGet();
      }
    }();
    req.setObjectId(DataOf(id));
    req.setSize(size);
  });
}

CoreWorker::StoreResult CoreWorker::CallNode(std::function<void(proto::Envelope::Builder)> fill) {
  StoreResult result;
  if (stopped_ || node_lost_) {
    result.status = absl::UnavailableError("lost the connection to the node daemon");
    return result;
  }
  absl::Notification done;
  PostToIo([&] {
    if (!node_conn_ || node_conn_->closed()) {
      result.status = absl::UnavailableError("lost the connection to the node daemon");
      done.Notify();
      return;
    }
    SendNodeRequest(*node_conn_, fill, [&](proto::Envelope::Reader msg) {
      if (!msg.isStoreReply()) {
        result.status = absl::UnavailableError("no reply from the node daemon");
      } else {
        auto r = msg.getStoreReply();
        if (r.getOk()) {
          result.offset = r.getOffset();
          result.size = r.getSize();
        } else {
          result.status = absl::Status(static_cast<absl::StatusCode>(r.getCode()),
                                       r.getError().cStr());
        }
      }
      done.Notify();
    });
  });
  done.WaitForNotification();
  return result;
}

CoreWorker::StoreResult CoreWorker::GetOrPull(const ObjectId& id, uint64_t size,
                                              const NodeId& node, const std::string& node_address,
                                              const std::string& owner) {
  StoreResult got = CallStore(kGet, id, 0);
  // NotFound: not here; Unavailable: being pulled here by another reader.
  bool absent = got.status.code() == absl::StatusCode::kNotFound ||
                got.status.code() == absl::StatusCode::kUnavailable;
  if (got.status.ok() || !absent || node.IsNil() || node == node_id_ || node_address.empty()) {
    return got;
  }
  // Another node has it: our daemon copies it here (once, however many ask).
  StoreResult pulled = CallNode([&](proto::Envelope::Builder env) {
    auto pull = env.initPullObject();
    pull.setObjectId(DataOf(id));
    pull.setSize(size);
    pull.setNodeId(DataOf(node));
    pull.setNodeAddress(node_address);
    pull.setJobId(DataOf(options_.job_id));
  });
  if (!pulled.status.ok()) return pulled;
  got = CallStore(kGet, id, 0);
  if (got.status.ok() && !owner.empty()) {
    NodeId here = node_id_;
    std::string here_address = node_address_;
    PostToIo([this, id, owner, here, here_address] {
      if (owner == listen_address_) {
        OnObjectLocationAdded(id, here, here_address);
        return;
      }
      absl::Status error;
      auto conn = PeerConnection(owner, &error);
      if (!conn) return;
      OutMessage out;
      auto location = out.Init().initAddObjectLocation();
      location.setObjectId(DataOf(id));
      location.setNodeId(DataOf(here));
      location.setNodeAddress(here_address);
      conn->Send(out.builder());
    });
  }
  return got;
}

void CoreWorker::DeleteCopies(const ObjectId& id, std::vector<std::string> node_addresses) {
  if (node_addresses.empty()) node_addresses.push_back("");  // our node
  PostToIo([this, id, node_addresses = std::move(node_addresses)] {
    for (const auto& address : node_addresses) {
      absl::Status error;
      auto conn = NodeConnection(address, &error);
      if (!conn || conn->closed()) continue;
      OutMessage out;
      out.Init().initStoreDelete().setObjectId(DataOf(id));
      conn->Send(out.builder());
    }
  });
}

void CoreWorker::OnObjectLocationAdded(const ObjectId& id, const NodeId& node,
                                       const std::string& address) {
  absl::MutexLock lock(&mu_);
  auto it = objects_.find(id);
  if (it != objects_.end() && (!it->second.owned || it->second.kind != ObjectEntry::Kind::kStored)) {
    return;  // not ours to track
  }
  if (it == objects_.end()) {
    DeleteCopies(id, {address});  // freed meanwhile: the new copy goes too
    return;
  }
  for (const auto& [n, a] : it->second.locations)
    if (n == node) return;
  it->second.locations.emplace_back(node, address);
}

void CoreWorker::OnNodeFrame(Connection& conn, proto::Envelope::Reader msg) {
  if (msg.isReclaimLeases()) {
    OnReclaimLeases();
    return;
  }
  if (msg.isListState()) {
    SendStateRows(conn, msg.getRequestId(), msg.getListState().cStr());
    return;
  }
  if (msg.isMarkNodeDead()) {
    OnRemoteNodeDead(IdFrom<NodeId>(msg.getMarkNodeDead()));
    return;
  }
  uint64_t request_id = msg.getRequestId();
  auto it = node_requests_.find(request_id);
  if (it == node_requests_.end()) {
    LUMEN_LOG(DEBUG) << "unexpected frame from the node daemon (request " << request_id << ")";
    return;
  }
  auto callback = std::move(it->second.callback);
  node_requests_.erase(it);
  callback(msg);
}

// ---------------------------------------------------------------------------
// Put / Get / Wait

std::shared_ptr<internal::RefHandle> CoreWorker::PutEncoded(std::string encoded) {
  if (encoded.size() > options_.inline_limit) {
    return PutWithWriter(encoded.size(),
                         [&](uint8_t* out) { std::memcpy(out, encoded.data(), encoded.size()); });
  }
  ObjectId id = ObjectId::ForPut();
  auto handle = std::make_shared<internal::RefHandle>(id, listen_address_);
  auto value = std::make_shared<const std::string>(std::move(encoded));
  SetObjectReady(id, [&](ObjectEntry& e) {
    e.kind = ObjectEntry::Kind::kInline;
    e.value = value;
  });
  return handle;
}

std::shared_ptr<internal::RefHandle> CoreWorker::PutWithWriter(
    uint64_t size, const std::function<void(uint8_t*)>& write) {
  ObjectId id = ObjectId::ForPut();
  StoreResult created = CallStore(kCreate, id, size);
  if (!created.status.ok()) {
    if (created.status.code() == absl::StatusCode::kResourceExhausted) {
      throw ObjectStoreFullError(std::string(created.status.message()));
    }
    throw Error(absl::StrCat("Put failed: ", created.status.message()));
  }
  store_->PrefaultForWrite(created.offset, size);
  try {
    write(store_->writable_base() + created.offset);
  } catch (...) {
    CallStore(kAbort, id, size);  // the half-written object goes
    throw;
  }
  StoreResult sealed = CallStore(kSeal, id, size);
  if (!sealed.status.ok()) {
    CallStore(kAbort, id, size);
    throw Error(absl::StrCat("Put failed: ", sealed.status.message()));
  }
  auto handle = std::make_shared<internal::RefHandle>(id, listen_address_);
  SetObjectReady(id, [&](ObjectEntry& e) {
    e.kind = ObjectEntry::Kind::kStored;
    e.stored_size = size;
    e.locations = {{node_id_, node_address_}};
  });
  return handle;
}

void CoreWorker::ThrowFailure(const Failure& f) {
  switch (f.kind) {
    case proto::FailureKind::TASK_ERROR:
    case proto::FailureKind::FUNCTION_NOT_FOUND:
      throw TaskError(
          absl::StrCat(f.exception_type.empty() ? "" : f.exception_type + ": ", f.message,
                       f.location.empty() ? "" : " (in " + f.location + ")"),
          f.exception_type, f.message, f.location);
    case proto::FailureKind::WORKER_CRASHED:
      throw WorkerCrashedError(f.message);
    case proto::FailureKind::OBJECT_LOST:
      throw ObjectLostError(f.message);
    case proto::FailureKind::ACTOR_DIED:
      throw ActorDiedError(f.message);
    case proto::FailureKind::STORE_FULL:
      throw ObjectStoreFullError(f.message);
    case proto::FailureKind::TYPE_MISMATCH:
      throw TypeMismatchError(f.message);
    default:
      throw Error(f.message);
  }
}

void CoreWorker::NotifyBlocked(bool blocked) {
  if (!options_.is_worker || !in_task) return;
  if (blocked && !is_actor_) {
    // Tasks queued behind this one could be what it waits for: hand them back
    // to their owners to run elsewhere (this is not a failed attempt), and the
    // ones that arrive while we wait too.
    std::deque<std::unique_ptr<TaskToRun>> queued;
    {
      absl::MutexLock lock(&exec_mu_);
      exec_blocked_ = true;
      queued.swap(exec_queue_);
      exec_queue_size_.store(0, std::memory_order_release);
    }
    for (auto& task : queued) {
      std::weak_ptr<Connection> reply_to = task->reply_to;
      PostToIo([this, reply_to, id = task->task_id, attempt = task->attempt] {
        if (auto conn = reply_to.lock()) SendRequeued(*conn, id, attempt);
      });
    }
  } else if (!blocked) {
    absl::MutexLock lock(&exec_mu_);
    exec_blocked_ = false;
  }
  SendToNode([blocked](proto::Envelope::Builder env) {
    if (blocked) {
      env.setWorkerBlocked();
    } else {
      env.setWorkerUnblocked();
    }
  });
}

internal::ObjectBytes CoreWorker::ReadyBytes(const ObjectId& id) {
  // A copy can vanish with its node while we read: when our node says so (it
  // tells us of the death before it answers the pull), the entry names another
  // copy or says the object is lost, and we look again.
  std::pair<NodeId, std::string> tried;
  std::string last_error;
  for (int attempt = 0;; ++attempt) {
    ObjectEntry::Kind kind;
    std::shared_ptr<const std::string> value;
    Failure failure;
    std::pair<NodeId, std::string> location;
    uint64_t size = 0;
    std::string owner;
    {
      absl::MutexLock lock(&mu_);
      auto it = objects_.find(id);
      if (it == objects_.end()) throw ObjectLostError("object " + id.Hex() + " is not known");
      kind = it->second.kind;
      value = it->second.value;
      failure = it->second.failure;
      size = it->second.stored_size;
      if (!it->second.locations.empty()) location = it->second.locations.front();
      owner = it->second.owned ? listen_address_ : it->second.owner_address;
    }
    switch (kind) {
      case ObjectEntry::Kind::kInline:
        return internal::ObjectBytes{*value, value};
      case ObjectEntry::Kind::kFailed:
        ThrowFailure(failure);
      case ObjectEntry::Kind::kStored:
        break;
    }
    if (attempt > 0 && location == tried) {
      throw ObjectLostError(absl::StrCat("object ", id.Hex(), " is lost: ", last_error));
    }
    tried = location;
    StoreResult got = GetOrPull(id, size, location.first, location.second, owner);
    if (got.status.ok()) {
      // The pin is released when the last reader of these bytes lets go.
      return PinnedBytes(id, got.offset, got.size);
    }
    last_error = std::string(got.status.message());
    if (attempt >= 3) throw ObjectLostError(absl::StrCat("object ", id.Hex(), " is lost: ", last_error));
  }
}

internal::ObjectBytes CoreWorker::PinnedBytes(const ObjectId& id, uint64_t offset, uint64_t size) {
  // The pin keeps the mapping alive and gives the object back to the store when
  // the last reader lets go, even if that happens after Shutdown.
  std::shared_ptr<objectstore::ShmSegment> segment = store_;
  std::shared_ptr<PinReleaser> releaser = releaser_;
  std::shared_ptr<const void> pin(nullptr, [segment, releaser, id](const void*) {
    absl::MutexLock lock(&releaser->mu);
    if (releaser->core == nullptr) return;
    releaser->core->SendToNode([id](proto::Envelope::Builder env) {
      env.initStoreRelease().setObjectId(DataOf(id));
    });
  });
  return internal::ObjectBytes{
      std::string_view(reinterpret_cast<const char*>(segment->readonly_base() + offset), size),
      std::move(pin)};
}

std::vector<CoreWorker::ObjectEntry*> CoreWorker::AwaitReady(
    const std::vector<const internal::RefHandle*>& refs, size_t num_ready,
    std::optional<std::chrono::milliseconds> timeout) {
  const auto deadline =
      std::chrono::steady_clock::now() + timeout.value_or(std::chrono::milliseconds(0));
  std::vector<ObjectEntry*> entries;
  entries.reserve(refs.size());
  // One scan under mu_: find the entries, count the ready ones and, when that is
  // not enough, register the waiter on the others. From then on only objects
  // becoming ready touch it (WakeWaitersLocked), once each.
  Waiter waiter;
  {
    absl::MutexLock lock(&mu_);
    size_t ready = 0;
    for (const auto* ref : refs) {
      auto it = objects_.find(ref->id());
      if (it == objects_.end()) throw ObjectLostError("object " + ref->id().Hex() + " is unknown");
      ObjectEntry& e = it->second;
      if (!e.owned && !e.ready && !e.requested) {
        // Borrowed and not here yet: ask its owner.
        e.requested = true;
        ObjectId id = ref->id();
        std::string owner = e.owner_address;
        PostToIo([this, id, owner] { RequestObjectFromOwner(id, owner); });
      }
      if (e.ready.load(std::memory_order_relaxed)) ++ready;
      entries.push_back(&e);
    }
    await_steps.fetch_add(entries.size(), std::memory_order_relaxed);
    if (ready >= num_ready) return entries;
    waiter.remaining = num_ready - ready;
    for (ObjectEntry* e : entries) {
      if (!e->ready.load(std::memory_order_relaxed)) e->waiters.push_back(&waiter);
    }
  }
  // Entries stay put: node_hash_map nodes are stable and `refs` keep them alive.
  bool done = SpinFor(std::chrono::microseconds(50), [&] { return waiter.done.HasBeenNotified(); });
  if (!done) {
    NotifyBlocked(true);
    if (timeout) {
      waiter.done.WaitForNotificationWithTimeout(
          absl::FromChrono(deadline - std::chrono::steady_clock::now()));
    } else {
      waiter.done.WaitForNotification();
    }
    NotifyBlocked(false);
  }
  {
    // Unregister from whatever is still not ready (a timeout, or a Wait that
    // needed fewer than all). Ready objects dropped their waiters already, and
    // after this nobody touches `waiter`: it is only counted down and notified
    // under mu_, so taking mu_ here also waits for a Notify() still returning.
    absl::MutexLock lock(&mu_);
    if (waiter.remaining > 0 || num_ready < entries.size()) {
      uint64_t visited = 0;
      for (ObjectEntry* e : entries) {
        if (e->ready.load(std::memory_order_relaxed)) continue;
        ++visited;
        std::erase(e->waiters, &waiter);
        if (e->waiters.empty()) std::vector<Waiter*>().swap(e->waiters);
      }
      await_steps.fetch_add(visited, std::memory_order_relaxed);
    }
  }
  return entries;
}

std::vector<internal::ObjectBytes> CoreWorker::Get(
    const std::vector<const internal::RefHandle*>& refs,
    std::optional<std::chrono::milliseconds> timeout) {
  auto entries = AwaitReady(refs, refs.size(), timeout);
  for (size_t i = 0; i < entries.size(); ++i) {
    if (!entries[i]->ready) {
      throw GetTimeoutError(absl::StrCat("Get timed out after ", timeout->count(),
                                         " ms waiting for object ", refs[i]->id().Hex()));
    }
  }
  std::vector<internal::ObjectBytes> out;
  out.reserve(refs.size());
  for (const auto* ref : refs) out.push_back(ReadyBytes(ref->id()));
  return out;
}

std::vector<bool> CoreWorker::Wait(const std::vector<const internal::RefHandle*>& refs,
                                   size_t num_returns,
                                   std::optional<std::chrono::milliseconds> timeout) {
  auto entries = AwaitReady(refs, num_returns, timeout);
  std::vector<bool> ready(entries.size());
  for (size_t i = 0; i < entries.size(); ++i) ready[i] = entries[i]->ready.load();
  return ready;
}

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
  task->queue_key = QueueKey(task->resources) + SchedulingKey(task->scheduling);
  task->max_retries = task->retries_left = std::max(0, options.max_retries);
  auto handle = std::make_shared<internal::RefHandle>(task->return_id, listen_address_);
  Enqueue(std::move(task));
  return handle;
}

void CoreWorker::Enqueue(std::unique_ptr<PendingTask> task) {
  for (auto& arg : task->args) {
    // Large values travel through the store, not inside the task's frame.
    if (!arg.ref && arg.value.size() > options_.inline_limit) {
      arg.ref = PutEncoded(std::move(arg.value));
      arg.value.clear();
    }
  }
  bool was_empty;
  {
    absl::MutexLock lock(&submit_mu_);
    was_empty = submissions_.empty();
    submissions_.push_back(std::move(task));
  }
  // One wake-up of the io thread per batch of submissions.
  if (was_empty) PostToIo([this] { DrainSubmissions(); });
}

void CoreWorker::DrainSubmissions() {
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
      // The caller's queue owns it from now on, in submission order.
      PendingTask* raw = task.get();
      GetActorClient(raw->actor->id(), raw->actor->owner_address())
          .queue.push_back(std::move(task));
      ResolveDependencies(raw);
      continue;
    }
    PendingTask* raw = task.release();
    ResolveDependencies(raw);
  }
}

// Takes ownership of `task` (raw while it waits for its arguments).
void CoreWorker::ResolveDependencies(PendingTask* task) {
  std::vector<std::pair<ObjectId, std::string>> to_request;
  {
    absl::MutexLock lock(&mu_);
    for (auto& arg : task->args) {
      if (!arg.ref) continue;
      auto it = objects_.find(arg.ref->id());
      if (it == objects_.end() || it->second.ready) continue;
      ObjectEntry& e = it->second;
      ++task->unresolved;
      e.on_ready.push_back([this, task] {
        if (--task->unresolved == 0) OnTaskResolved(task);
      });
      if (!e.owned && !e.requested) {
        e.requested = true;
        to_request.emplace_back(arg.ref->id(), e.owner_address);
      }
    }
  }
  for (auto& [id, owner] : to_request) RequestObjectFromOwner(id, owner);
  if (task->unresolved == 0) OnTaskResolved(task);
}

void CoreWorker::OnTaskResolved(PendingTask* raw) {
  if (raw->kind == proto::TaskKind::ACTOR_METHOD) {
    // Owned by its actor client's queue; it goes out in submission order.
    {
      absl::MutexLock lock(&mu_);
      for (auto& arg : raw->args) {
        if (!arg.ref) continue;
        auto it = objects_.find(arg.ref->id());
        if (it != objects_.end() && it->second.kind == ObjectEntry::Kind::kFailed) {
          raw->dep_failure = it->second.failure;
        }
      }
    }
    raw->resolved = true;
    auto cit = actor_clients_.find(raw->actor->id());
    if (cit != actor_clients_.end()) PumpActorClient(*cit->second);
    return;
  }
  std::unique_ptr<PendingTask> task(raw);
  if (task->kind == proto::TaskKind::ACTOR_CREATION) {
    auto rit = owned_actors_.find(task->return_id);
    if (rit != owned_actors_.end()) StartActor(*rit->second);
    return;
  }
  // A failed argument fails the task with the same error (as in Ray).
  {
    absl::MutexLock lock(&mu_);
    for (auto& arg : task->args) {
      if (!arg.ref) continue;
      auto it = objects_.find(arg.ref->id());
      if (it != objects_.end() && it->second.kind == ObjectEntry::Kind::kFailed) {
        Failure f = it->second.failure;
        mu_.Unlock();
        FailTask(task.release(), f);
        mu_.Lock();
        return;
      }
    }
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
      FailTask(task.release(), Failure{proto::FailureKind::OBJECT_LOST, "",
                                       "lost the connection to the node daemon", ""});
    }
    return;
  }
  ++queue.pending_lease_requests;
  SchedulingQueue* q = &queue;
  AcquireLease(queue.shape, [this, q](proto::LeaseReply::Reader reply,
                                      std::shared_ptr<Connection> node) {
    OnLeaseReply(q, reply, std::move(node));
  });
}

uint64_t CoreWorker::SendNodeRequest(Connection& conn,
                                     const std::function<void(proto::Envelope::Builder)>& fill,
                                     std::function<void(proto::Envelope::Reader)> callback) {
  uint64_t request_id = next_request_id_++;
  node_requests_[request_id] = NodeRequest{conn.id(), std::move(callback)};
  OutMessage out;
  auto env = out.Init();
  env.setRequestId(request_id);
  fill(env);
  conn.Send(out.builder());
  return request_id;
}

void CoreWorker::AskWorkerExitCause(const std::shared_ptr<Connection>& node,
                                    const WorkerId& worker,
                                    std::function<void(std::string cause)> done) {
  auto timeout = options_.worker_exit_cause_timeout;
  if (!node || node->closed() || worker.IsNil() || timeout.count() <= 0 || stopped_) {
    done("");
    return;
  }
  // Answered by the reply, the deadline or the node's connection closing,
  // whichever comes first; `done` runs once.
  struct State {
    std::function<void(std::string)> done;
    std::unique_ptr<boost::asio::steady_timer> timer;
    uint64_t request_id = 0;
  };
  auto state = std::make_shared<State>();
  state->done = std::move(done);
  auto finish = [state](std::string cause) {
    if (!state->done) return;
    auto done = std::move(state->done);
    state->done = nullptr;
    if (state->timer) state->timer->cancel();
    done(std::move(cause));
  };
  state->request_id = SendNodeRequest(
      *node,
      [&](proto::Envelope::Builder env) {
        auto query = env.initGetWorkerExit();
        query.setWorkerId(DataOf(worker));
        query.setTimeoutMs(static_cast<uint32_t>(timeout.count()));
      },
      [finish](proto::Envelope::Reader msg) {
        bool known = msg.isWorkerExit() && msg.getWorkerExit().getKnown();
        finish(known ? std::string(msg.getWorkerExit().getCause().cStr()) : std::string());
      });
  if (!state->done) return;  // answered already (the connection was closing)
  // The daemon answers at the same deadline; a little slack lets its answer win.
  state->timer = std::make_unique<boost::asio::steady_timer>(
      io_, timeout + std::chrono::milliseconds(200));
  state->timer->async_wait([this, state, finish](const boost::system::error_code& ec) {
    if (ec || !state->done) return;
    node_requests_.erase(state->request_id);
    finish("");
  });
}

std::shared_ptr<Connection> CoreWorker::NodeConnection(const std::string& address,
                                                       absl::Status* error) {
  if (address.empty() || address == node_address_) return node_conn_;
  auto it = remote_nodes_.find(address);
  if (it != remote_nodes_.end() && !it->second->closed()) return it->second;
  auto socket = ConnectToAddress(io_, address, options_.session_dir);
  if (!socket.ok()) {
    *error = socket.status();
    return nullptr;
  }
  auto conn = Connection::Create(std::move(*socket));
  conn->Start([this](Connection& c, proto::Envelope::Reader m) { OnNodeFrame(c, m); },
              [this](Connection& c, const absl::Status& why) { OnRemoteNodeLost(c, why); });
  OutMessage out;
  auto hello = InitHello(out.Init(), proto::Role::REMOTE_OWNER);
  hello.setWorkerId(DataOf(options_.worker_id));
  hello.setJobId(DataOf(options_.job_id));
  hello.setExePath(exe_path_);
  hello.setListenAddress(listen_address_);
  hello.setIsDriver(!options_.is_worker);
  conn->Send(out.builder());
  remote_nodes_[address] = conn;
  return conn;
}

void CoreWorker::OnRemoteNodeDead(const NodeId& node) {
  // Its workers may still be running, but the cluster gave up on them: what
  // they run is retried (or fails) as if they had died.
  absl::Status why = absl::UnavailableError(
      absl::StrCat("node ", node.Hex().substr(0, 12), " was declared dead"));
  std::vector<std::shared_ptr<Connection>> doomed;
  for (auto& [key, queue] : queues_) {
    for (auto& lease : queue->leases) {
      if (lease->node_id != node) continue;
      // Nothing more goes to it while the others close (retries would pick it).
      lease->node_dead = true;
      if (lease->conn) doomed.push_back(lease->conn);
      if (lease->node && lease->node != node_conn_) doomed.push_back(lease->node);
    }
  }
  for (auto& [id, record] : owned_actors_) {
    if (record->node_id != node || !record->conn) continue;
    doomed.push_back(record->conn);
    // Our own calls to it go to its next incarnation, not to a process the
    // cluster has given up on (which may linger a moment after its node).
    auto client = actor_clients_.find(id);
    if (client != actor_clients_.end() && client->second->conn &&
        client->second->address == record->address) {
      doomed.push_back(client->second->conn);
    }
  }
  // Requests waiting at that node's daemon are answered by its closing.
  for (const auto& [address, conn] : remote_nodes_) {
    auto it = remote_node_ids_.find(address);
    if (it != remote_node_ids_.end() && it->second == node) doomed.push_back(conn);
  }
  for (auto& conn : doomed) conn->Close(why);
  // Copies there are gone: readers are sent to the others; an object with no
  // copy left is lost (no lineage reconstruction).
  absl::MutexLock lock(&mu_);
  for (auto& [id, entry] : objects_) {
    if (!entry.owned || !entry.ready || entry.kind != ObjectEntry::Kind::kStored) continue;
    auto& copies = entry.locations;
    auto before = copies.size();
    copies.erase(std::remove_if(copies.begin(), copies.end(),
                                [&](const auto& copy) { return copy.first == node; }),
                 copies.end());
    if (copies.empty() && before > 0) {
      entry.kind = ObjectEntry::Kind::kFailed;
      entry.failure = Failure{proto::FailureKind::OBJECT_LOST, "lumen::ObjectLostError",
                              absl::StrCat("object ", id.Hex(), ": its only copy was on node ",
                                           node.Hex(), ", which died"),
                              ""};
    }
  }
}

void CoreWorker::OnRemoteNodeLost(Connection& conn, const absl::Status& why) {
  for (auto it = remote_nodes_.begin(); it != remote_nodes_.end(); ++it) {
    if (it->second.get() == &conn) {
      auto keep = it->second;
      remote_nodes_.erase(it);
      PostToIo([keep] {});
      break;
    }
  }
  if (stopped_) return;
  LUMEN_LOG(DEBUG) << "lost a remote node daemon: " << why;
  std::vector<std::function<void(proto::Envelope::Reader)>> failed;
  for (auto it = node_requests_.begin(); it != node_requests_.end();) {
    if (it->second.conn_id == conn.id()) {
      failed.push_back(std::move(it->second.callback));
      node_requests_.erase(it++);
    } else {
      ++it;
    }
  }
  capnp::MallocMessageBuilder empty;
  auto reader = empty.initRoot<proto::Envelope>().asReader();
  for (auto& callback : failed) callback(reader);
}

void CoreWorker::SendLeaseEnd(const std::shared_ptr<Connection>& node, uint64_t lease_id,
                              bool kill) {
  if (!node || node->closed() || lease_id == 0) return;
  OutMessage out;
  if (kill) {
    out.Init().setKillLease(lease_id);
  } else {
    out.Init().setReturnLease(lease_id);
  }
  node->Send(out.builder());
}

void CoreWorker::AcquireLease(const LeaseShape& shape, LeaseCallback done, std::string target,
                              int attempt) {
  auto refuse = [&done](const std::string& why) {
    capnp::MallocMessageBuilder message;
    auto reply = message.initRoot<proto::LeaseReply>();
    reply.setGranted(false);
    reply.setError(why);
    done(reply.asReader(), nullptr);
  };
  if (stopped_) return;
  absl::Status error;
  std::shared_ptr<Connection> node = NodeConnection(target, &error);
  if (!node || node->closed()) {
    if (!target.empty() && attempt < 100 && node_conn_ && !node_conn_->closed()) {
      // The node we were sent to is gone: ask ours again, once its view catches up.
      auto timer = std::make_shared<boost::asio::steady_timer>(io_, std::chrono::milliseconds(50));
      timer->async_wait([this, timer, shape, done = std::move(done), attempt](
                            const boost::system::error_code&) mutable {
        AcquireLease(shape, std::move(done), "", attempt + 1);
      });
      return;
    }
    refuse(target.empty() ? "lost the connection to the node daemon"
                          : absl::StrCat("cannot reach node ", target, ": ", error.message()));
    return;
  }
  LeaseAttempt pending{shape, std::move(done), target, attempt, node};
  SendNodeRequest(
      *node,
      [&](proto::Envelope::Builder env) {
        auto lease = env.initRequestLease();
        SetResources(lease.initResources(shape.resources.size()), shape.resources);
        SetResources(lease.initPlacement(shape.placement.size()), shape.placement);
        lease.setActor(shape.actor);
        lease.setDetached(shape.detached);
        lease.setStrategy(static_cast<proto::SchedulingKind>(shape.scheduling.kind));
        if (!shape.scheduling.node.IsNil()) lease.setAffinityNode(DataOf(shape.scheduling.node));
        lease.setAffinitySoft(shape.scheduling.soft);
        lease.setGrantOrReject(!target.empty());
        if (!shape.scheduling.placement_group.empty()) {
          lease.setPlacementGroup(capnp::Data::Reader(
              reinterpret_cast<const uint8_t*>(shape.scheduling.placement_group.data()),
              shape.scheduling.placement_group.size()));
        }
        lease.setBundleIndex(shape.scheduling.bundle_index);
        lease.setName(shape.name);
      },
      [this, pending = std::move(pending)](proto::Envelope::Reader msg) mutable {
        OnAcquireLeaseReply(std::move(pending), msg);
      });
}

void CoreWorker::OnAcquireLeaseReply(LeaseAttempt pending, proto::Envelope::Reader msg) {
  auto give_up = [&](const std::string& why) {
    capnp::MallocMessageBuilder message;
    auto reply = message.initRoot<proto::LeaseReply>();
    reply.setGranted(false);
    reply.setError(why);
    pending.done(reply.asReader(), nullptr);
  };
  if (!msg.isLeaseReply()) {
    // The node went away before answering: ours is gone for good, another
    // node's means asking ours again.
    if (!pending.target.empty()) {
      AcquireLease(pending.shape, std::move(pending.done), "", pending.attempt + 1);
    } else {
      give_up("lost the connection to the node daemon");
    }
    return;
  }
  auto reply = msg.getLeaseReply();
  if (reply.getWaiting()) {
    // Not an answer: nothing in the cluster can run it yet. Say so once per shape.
    if (!warned_infeasible_[pending.shape.name]) {
      warned_infeasible_[pending.shape.name] = true;
      LUMEN_LOG(WARNING) << reply.getError().cStr();
    }
    uint64_t conn_id = pending.node->id();
    node_requests_[msg.getRequestId()] = NodeRequest{
        conn_id, [this, pending = std::move(pending)](proto::Envelope::Reader next) mutable {
          OnAcquireLeaseReply(std::move(pending), next);
        }};
    return;
  }
  constexpr int kMaxAttempts = 100;
  bool more = reply.getSpillbackAddress().size() > 0 || reply.getRetry();
  if (more && pending.attempt >= kMaxAttempts) {
    give_up(absl::StrCat("no node granted a worker for ", pending.shape.name, " after ",
                         kMaxAttempts, " spillbacks and retries"));
    return;
  }
  if (reply.getSpillbackAddress().size() > 0) {
    remote_node_ids_[reply.getSpillbackAddress().cStr()] = IdFrom<NodeId>(reply.getSpillbackNode());
    AcquireLease(pending.shape, std::move(pending.done), reply.getSpillbackAddress().cStr(),
                 pending.attempt + 1);
    return;
  }
  if (reply.getRetry()) {
    auto timer = std::make_shared<boost::asio::steady_timer>(io_, std::chrono::milliseconds(20));
    timer->async_wait([this, timer, shape = pending.shape, done = std::move(pending.done),
                       attempt = pending.attempt](const boost::system::error_code&) mutable {
      AcquireLease(shape, std::move(done), "", attempt + 1);
    });
    return;
  }
  pending.done(reply, reply.getGranted() ? pending.node : nullptr);
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
      FailTask(task.release(), Failure{proto::FailureKind::OTHER, "", why, ""});
    }
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
      out.setInline(capnp::Data::Reader(reinterpret_cast<const uint8_t*>(entry.value->data()),
                                        entry.value->size()));
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
  absl::MutexLock lock(&mu_);
  for (size_t i = 0; i < task.args.size(); ++i) {
    const auto& arg = task.args[i];
    if (!arg.ref) {
      args[i].setInline(capnp::Data::Reader(reinterpret_cast<const uint8_t*>(arg.value.data()),
                                            arg.value.size()));
      continue;
    }
    auto it = objects_.find(arg.ref->id());
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
  CompleteTask(task.get(), reply.getResult());
  task.reset();  // releases the argument refs
  DispatchQueue(queue);
  MaybeReturnLease(lease);
}

void CoreWorker::RecordFinished(PendingTask& task, const char* state) {
  if (task.kind == proto::TaskKind::ACTOR_CREATION) return;
  finished_tasks_.push_back(FinishedTask{task.task_id, std::move(task.display_name), state});
  if (finished_tasks_.size() > 1000) finished_tasks_.pop_front();
}

void CoreWorker::SendStateRows(Connection& conn, uint64_t request_id, const std::string& what) {
  std::vector<std::vector<std::pair<std::string, std::string>>> rows;
  std::string owner = absl::StrCat(options_.is_worker ? "worker " : "driver ", ::getpid());
  auto short_id = [](const std::string& hex) { return hex.substr(0, 16); };
  if (what == "actors") {
    for (const auto& [id, record] : owned_actors_) {
      static constexpr const char* kStates[] = {"PENDING_CREATION", "ALIVE", "RESTARTING", "DEAD"};
      rows.push_back({{"ACTOR_ID", short_id(id.Hex())},
                      {"CLASS", record->factory},
                      {"STATE", kStates[static_cast<int>(record->state)]},
                      {"NAME", record->options.name},
                      {"NODE", record->node_id.IsNil() ? "" : short_id(record->node_id.Hex())},
                      {"PID", record->pid ? std::to_string(record->pid) : ""},
                      {"RESTARTS", std::to_string(record->restarts)},
                      {"OWNER", owner}});
    }
  } else if (what == "tasks") {
    for (const auto& [key, queue] : queues_) {
      for (const auto& task : queue->ready) {
        rows.push_back({{"TASK_ID", short_id(task->task_id.Hex())},
                        {"NAME", task->display_name},
                        {"STATE", "PENDING_NODE_ASSIGNMENT"},
                        {"NODE", ""},
                        {"OWNER", owner}});
      }
      for (const auto& lease : queue->leases) {
        for (const auto& [id, task] : lease->in_flight) {
          rows.push_back({{"TASK_ID", short_id(id.Hex())},
                          {"NAME", task->display_name},
                          {"STATE", "RUNNING"},
                          {"NODE", short_id(lease->node_id.Hex())},
                          {"OWNER", owner}});
        }
      }
    }
    for (const auto& [id, client] : actor_clients_) {
      for (const auto& [tid, task] : client->in_flight) {
        rows.push_back({{"TASK_ID", short_id(tid.Hex())},
                        {"NAME", task->display_name},
                        {"STATE", "RUNNING"},
                        {"NODE", ""},
                        {"OWNER", owner}});
      }
      for (const auto& task : client->queue) {
        rows.push_back({{"TASK_ID", short_id(task->task_id.Hex())},
                        {"NAME", task->display_name},
                        {"STATE", "PENDING_ACTOR"},
                        {"NODE", ""},
                        {"OWNER", owner}});
      }
    }
    for (const auto& f : finished_tasks_) {
      rows.push_back({{"TASK_ID", short_id(f.id.Hex())},
                      {"NAME", f.name},
                      {"STATE", f.state},
                      {"NODE", ""},
                      {"OWNER", owner}});
    }
  } else if (what == "objects") {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, e] : objects_) {
      if (!e.owned || e.is_actor) continue;
      std::string where;
      for (const auto& [node, address] : e.locations) {
        absl::StrAppend(&where, where.empty() ? "" : ",", node.Hex().substr(0, 12));
      }
      const char* kind = !e.ready ? "PENDING"
                         : e.kind == ObjectEntry::Kind::kInline ? "INLINE"
                         : e.kind == ObjectEntry::Kind::kStored ? "STORED"
                                                                : "FAILED";
      uint64_t size = e.kind == ObjectEntry::Kind::kStored ? e.stored_size
                      : e.value                            ? e.value->size()
                                                           : 0;
      rows.push_back({{"OBJECT_ID", short_id(id.Hex())},
                      {"STATE", kind},
                      {"SIZE", e.ready ? objectstore::FormatBytes(size) : ""},
                      {"COPIES_ON", where},
                      {"REFS", absl::StrCat(e.local_refs, " local, ", e.borrowers, " borrowers")},
                      {"OWNER", owner}});
    }
  }
  capnp::MallocMessageBuilder out;
  auto env = out.initRoot<proto::Envelope>();
  env.setRequestId(request_id);
  auto list = env.initStateRows(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    auto fields = list[i].initFields(rows[i].size());
    for (size_t j = 0; j < rows[i].size(); ++j) {
      fields[j].setKey(rows[i][j].first);
      fields[j].setValue(capnp::Data::Reader(
          reinterpret_cast<const uint8_t*>(rows[i][j].second.data()), rows[i][j].second.size()));
    }
  }
  conn.Send(out);
}

void CoreWorker::CompleteTask(PendingTask* task, proto::Value::Reader result) {
  RecordFinished(*task, result.isError() ? "FAILED" : "FINISHED");
  switch (result.which()) {
    case proto::Value::INLINE: {
      auto data = result.getInline();
      auto value = std::make_shared<const std::string>(reinterpret_cast<const char*>(data.begin()),
                                                       data.size());
      SetObjectReady(task->return_id, [&](ObjectEntry& e) {
        e.kind = ObjectEntry::Kind::kInline;
        e.value = value;
      });
      break;
    }
    case proto::Value::STORED: {
      uint64_t size = result.getStored().getSize();
      std::pair<NodeId, std::string> location{IdFrom<NodeId>(result.getStored().getNodeId()),
                                              result.getStored().getNodeAddress().cStr()};
      SetObjectReady(
          task->return_id,
          [&](ObjectEntry& e) {
            e.kind = ObjectEntry::Kind::kStored;
            e.stored_size = size;
            e.locations = {location};
          },
          /*owned_result=*/true);
      break;
    }
    case proto::Value::ERROR: {
      Failure f = FailureFromProto(result.getError());
      SetObjectReady(task->return_id, [&](ObjectEntry& e) {
        e.kind = ObjectEntry::Kind::kFailed;
        e.failure = f;
      });
      break;
    }
  }
}

void CoreWorker::FailTask(PendingTask* raw, Failure failure) {
  std::unique_ptr<PendingTask> task(raw);
  RecordFinished(*task, "FAILED");
  SetObjectReady(task->return_id, [&](ObjectEntry& e) {
    e.kind = ObjectEntry::Kind::kFailed;
    e.failure = failure;
  });
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
    if (task->retries_left > 0) {
      --task->retries_left;
      ++task->attempt;
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
        FailTask(task.release(), Failure{proto::FailureKind::WORKER_CRASHED, "", message, ""});
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
  PostToIo([keep = std::shared_ptr<Lease>(std::move(owned))] {});
  DispatchQueue(queue);
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
  lease.idle_timer->expires_after(options_.lease_idle_timeout);
  Lease* l = &lease;
  SchedulingQueue* q = lease.queue;
  uint64_t lease_id = lease.lease_id;
  lease.idle_timer->async_wait([this, l, q, lease_id](const boost::system::error_code& ec) {
    if (ec || stopped_) return;
    // The lease may be gone by now: find it by identity in its queue.
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
    PostToIo([owned] {});  // close callbacks may still refer to it
    return;
  }
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

// ---------------------------------------------------------------------------
// Peers: borrowers asking for objects, owners pushing tasks (worker mode).

void CoreWorker::SendPeerHello(Connection& conn) {
  OutMessage out;
  InitHello(out.Init(), proto::Role::PEER);
  conn.Send(out.builder());
}

std::shared_ptr<Connection> CoreWorker::PeerConnection(const std::string& address,
                                                       absl::Status* error) {
  auto it = peers_.find(address);
  if (it != peers_.end() && !it->second->closed()) return it->second;
  auto socket = ConnectToAddress(io_, address, options_.session_dir);
  if (!socket.ok()) {
    *error = socket.status();
    return nullptr;
  }
  auto conn = Connection::Create(std::move(*socket));
  conn->Start([this](Connection& c, proto::Envelope::Reader m) { OnPeerFrame(c, m); },
              [this, address](Connection&, const absl::Status& why) {
                peers_.erase(address);
                if (stopped_) return;
                // The owner is gone: what we were waiting for from it is lost.
                std::vector<ObjectId> lost;
                {
                  absl::MutexLock lock(&mu_);
                  for (auto& [id, e] : objects_) {
                    if (!e.owned && !e.ready && e.requested && e.owner_address == address) {
                      lost.push_back(id);
                    }
                  }
                }
                std::vector<ObjectId> orphaned;
                for (auto& [actor_id, client] : actor_clients_) {
                  if (client->resolving && client->owner == address) orphaned.push_back(actor_id);
                }
                for (const auto& actor_id : orphaned) {
                  OnActorOwnerUnreachable(actor_id, absl::StrCat("the actor's owner at ", address,
                                                                 " died: ", why.message()));
                }
                for (const auto& id : lost) {
                  SetObjectReady(id, [&](ObjectEntry& e) {
                    e.kind = ObjectEntry::Kind::kFailed;
                    e.failure = Failure{proto::FailureKind::OBJECT_LOST, "",
                                        absl::StrCat("the owner of object ", id.Hex(), " at ",
                                                     address, " died: ", why.message()),
                                        ""};
                  });
                }
              });
  SendPeerHello(*conn);
  peers_[address] = conn;
  return conn;
}

void CoreWorker::RequestObjectFromOwner(const ObjectId& id, const std::string& owner) {
  absl::Status error;
  auto conn = PeerConnection(owner, &error);
  if (!conn) {
    SetObjectReady(id, [&](ObjectEntry& e) {
      e.kind = ObjectEntry::Kind::kFailed;
      e.failure = Failure{proto::FailureKind::OBJECT_LOST, "",
                          absl::StrCat("the owner of object ", id.Hex(), " is unreachable: ",
                                       error.message()),
                          ""};
    });
    return;
  }
  uint64_t request_id = next_request_id_++;
  peer_requests_[request_id] = [this, id](proto::Envelope::Reader msg) {
    if (!msg.isObjectStatus()) return;
    auto value = msg.getObjectStatus().getValue();
    switch (value.which()) {
      case proto::Value::INLINE: {
        auto data = value.getInline();
        auto bytes = std::make_shared<const std::string>(
            reinterpret_cast<const char*>(data.begin()), data.size());
        SetObjectReady(id, [&](ObjectEntry& e) {
          e.kind = ObjectEntry::Kind::kInline;
          e.value = bytes;
        });
        break;
      }
      case proto::Value::STORED: {
        uint64_t size = value.getStored().getSize();
        std::pair<NodeId, std::string> location{IdFrom<NodeId>(value.getStored().getNodeId()),
                                                value.getStored().getNodeAddress().cStr()};
        SetObjectReady(id, [&](ObjectEntry& e) {
          e.kind = ObjectEntry::Kind::kStored;
          e.stored_size = size;
          e.locations = {location};
        });
        break;
      }
      case proto::Value::ERROR: {
        Failure f = FailureFromProto(value.getError());
        SetObjectReady(id, [&](ObjectEntry& e) {
          e.kind = ObjectEntry::Kind::kFailed;
          e.failure = f;
        });
        break;
      }
    }
  };
  OutMessage out;
  auto env = out.Init();
  env.setRequestId(request_id);
  env.setWaitObject(DataOf(id));
  conn->Send(out.builder());
}

void CoreWorker::SendObjectStatus(Connection& conn, uint64_t request_id, const ObjectId& id) {
  OutMessage out;
  auto env = out.Init();
  env.setRequestId(request_id);
  auto value = env.initObjectStatus().initValue();
  {
    absl::MutexLock lock(&mu_);
    auto it = objects_.find(id);
    if (it == objects_.end()) {
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
  auto conn = (local ? local_admission_ : admission_).Admit(std::move(socket));
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
                auto bit = borrowed_by_.find(id);
                if (bit != borrowed_by_.end()) {
                  auto counts = std::move(bit->second);
                  borrowed_by_.erase(bit);
                  for (const auto& [object, n] : counts) {
                    borrowed_by_[id][object] = n;
                    OnBorrowerChange(id, object, -n);
                  }
                  borrowed_by_.erase(id);
                }
                PostToIo([this, id] {
                  inbound_.erase(id);
                  parked_waits_.erase(id);
                });
              });
}

void CoreWorker::OnPeerFrame(Connection& conn, proto::Envelope::Reader msg) {
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
      auto cb = std::move(it->second);
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
      ObjectId id = IdFrom<ObjectId>(data);
      uint64_t request_id = msg.getRequestId();
      bool ready = true;
      bool too_many = false;
      {
        absl::MutexLock lock(&mu_);
        auto it = objects_.find(id);
        if (it != objects_.end() && !it->second.ready) {
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
                         auto rit = owned_actors_.find(id);
                         int retries = rit == owned_actors_.end()
                                           ? 0
                                           : rit->second->options.max_task_retries;
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
      if (owned_actors_.contains(id)) {
        KillOwnedActor(id, msg.getRequestId() != 0, "killed by lumen::ActorHandle::Kill()");
      } else if (is_actor_ && id == actor_id_) {
        // Told directly (its owner is gone): free the name and end.
        if (!actor_name_.empty() && !options_.head_address.empty()) {
          (void)CallHead(options_.head_address, [&](proto::Envelope::Builder env) {
            auto entry = env.initUnregisterActorName();
            entry.setName(actor_name_);
            entry.setActorId(DataOf(id));
          });
        }
        std::fflush(stdout);
        std::fflush(stderr);
        ::unlink(listen_address_.c_str());
        std::_Exit(0);
      }
      return;
    }
    case proto::Envelope::ESCAPE_REF: {
      auto data = msg.getEscapeRef();
      ObjectId id = IdFrom<ObjectId>(data);
      absl::MutexLock lock(&mu_);
      auto it = objects_.find(id);
      if (it != objects_.end() && it->second.owned) ++it->second.pending_escapes;
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
        is_actor_ = true;
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
      {
        absl::MutexLock lock(&exec_mu_);
        // An actor's calls run here whatever it waits for; a plain task blocked
        // in Get hands new ones back.
        if (exit_after_call_) {
          // The actor is exiting: the call is dropped, and its caller sees the
          // actor die.
          task.reset();
        } else if (!exec_blocked_ || is_actor_) {
          exec_queue_.push_back(std::move(task));
          exec_queue_size_.fetch_add(1, std::memory_order_release);
        }
      }
      if (task) SendRequeued(conn, task->task_id, task->attempt);
      return;
    }
    default:
      LUMEN_LOG(DEBUG) << "ignoring unexpected frame from a peer";
  }
}

// ---------------------------------------------------------------------------
// Task execution (worker mode)

void CoreWorker::RunTaskLoop() {
  ExecutorLoop();
  for (auto& t : executor_threads_) t.join();
}

void CoreWorker::ExecutorLoop() {
  while (!node_lost_ && !stopped_) {
    auto have_work = [this] {
      return exec_queue_size_.load(std::memory_order_acquire) > 0 || node_lost_.load();
    };
    if (!SpinFor(std::chrono::microseconds(100), have_work)) {
      absl::MutexLock lock(&exec_mu_);
      exec_mu_.AwaitWithTimeout(absl::Condition(&have_work), absl::Milliseconds(200));
    }
    std::unique_ptr<TaskToRun> task;
    {
      absl::MutexLock lock(&exec_mu_);
      if (exec_queue_.empty() || exit_after_call_) continue;
      task = std::move(exec_queue_.front());
      exec_queue_.pop_front();
      exec_queue_size_.fetch_sub(1, std::memory_order_release);
    }
    ExecuteTask(*task);
  }
}

namespace {
// Set by ExitActor() on the thread running the call that asked to exit.
thread_local bool this_call_exits = false;
// The GPUs of the task this thread runs (lumen::GetGpuIds).
thread_local std::vector<int> current_gpu_ids;
}  // namespace

std::vector<int> CoreWorker::CurrentGpuIds() { return current_gpu_ids; }

void CoreWorker::SetGpuIds(proto::TaskSpec::Builder spec, const std::vector<int>& ids) {
  auto list = spec.initGpuIds(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) list.set(i, ids[i]);
}

void CoreWorker::UseGpus(const std::vector<int>& ids) {
  current_gpu_ids = ids;
  // CUDA reads CUDA_VISIBLE_DEVICES when it initialises in this process: a task
  // with GPUs sees exactly its own; once set, later tasks without GPUs see none.
  static bool env_set = false;
  if (ids.empty() && !env_set) return;
  std::string value;
  for (size_t i = 0; i < ids.size(); ++i) absl::StrAppend(&value, i ? "," : "", ids[i]);
  ::setenv("CUDA_VISIBLE_DEVICES", value.c_str(), 1);
  env_set = true;
}

void CoreWorker::ExitActorAfterCall() {
  if (!is_actor_ || !in_task) throw Error("lumen::ExitActor() must be called inside an actor method");
  this_call_exits = true;
  exit_after_call_ = true;  // no further calls start
}

void CoreWorker::ExitProcessWhenFlushed() {
  // Runs on the io thread: once every queued reply is written (or after two
  // seconds, if a peer stops reading), leave.
  static const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  bool flushed = true;
  for (auto& [id, conn] : inbound_) flushed &= conn->closed() || conn->idle();
  if (!flushed && std::chrono::steady_clock::now() < deadline) {
    auto timer = std::make_shared<boost::asio::steady_timer>(io_, std::chrono::milliseconds(1));
    timer->async_wait([this, timer](const boost::system::error_code&) { ExitProcessWhenFlushed(); });
    return;
  }
  std::fflush(stdout);
  std::fflush(stderr);
  ::unlink(listen_address_.c_str());
  std::_Exit(0);
}

void CoreWorker::ExecuteTask(TaskToRun& task) {
  auto start = std::chrono::steady_clock::now();
  std::string location =
      absl::StrCat("task ", task.function, ", pid ", ::getpid(), " on node ",
                   node_id_.Hex().substr(0, 12), ", binary ", exe_path_);
  std::string result;
  std::optional<Failure> failure;
  in_task = true;
  if (task.kind == proto::TaskKind::ACTOR_CREATION) actor_gpu_ids_ = task.gpu_ids;
  UseGpus(task.kind == proto::TaskKind::ACTOR_METHOD ? actor_gpu_ids_ : task.gpu_ids);
  try {
    const internal::RemoteFunction* fn = internal::FindRemoteFunction(task.function);
    auto expected = task.kind == proto::TaskKind::ACTOR_CREATION
                        ? internal::RemoteFunction::Kind::kActorFactory
                    : task.kind == proto::TaskKind::ACTOR_METHOD
                        ? internal::RemoteFunction::Kind::kMethod
                        : internal::RemoteFunction::Kind::kFunction;
    if (fn != nullptr && fn->kind != expected) {
      failure = Failure{proto::FailureKind::OTHER, "lumen::Error",
                        absl::StrCat("'", task.function,
                                     "' is registered, but not as what was called (a task, an "
                                     "actor factory or an actor method)"),
                        location};
    } else if (task.kind == proto::TaskKind::ACTOR_METHOD && actor_instance_ == nullptr) {
      failure = Failure{proto::FailureKind::OTHER, "lumen::Error",
                        "this worker holds no actor instance", location};
    } else if (fn == nullptr) {
      failure = Failure{proto::FailureKind::FUNCTION_NOT_FOUND, "lumen::FunctionNotFound",
                        absl::StrCat("function '", task.function,
                                     "' is not registered in the worker binary ", exe_path_,
                                     " (is it listed in LUMEN_REMOTE(...) in the binary the "
                                     "workers run?)"),
                        location};
    } else {
      std::vector<internal::ObjectBytes> args;
      args.reserve(task.args.size());
      for (auto& arg : task.args) {
        if (!arg.is_stored) {
          args.push_back(internal::ObjectBytes{arg.value, nullptr});
          continue;
        }
        StoreResult got = GetOrPull(arg.stored, arg.size, arg.node, arg.node_address, arg.owner);
        if (!got.status.ok()) {
          throw ObjectLostError(absl::StrCat("argument object ", arg.stored.Hex(),
                                             " is lost: ", got.status.message()));
        }
        args.push_back(PinnedBytes(arg.stored, got.offset, got.size));
      }
      if (task.kind == proto::TaskKind::ACTOR_CREATION) {
        actor_instance_ = fn->create(args);
        result = codec::EncodeValue<uint8_t>(0);
        // Concurrent actors run calls on several executor threads.
        for (uint32_t i = 1; i < task.max_concurrency; ++i) {
          executor_threads_.emplace_back([this] { ExecutorLoop(); });
        }
      } else if (task.kind == proto::TaskKind::ACTOR_METHOD) {
        result = fn->call(actor_instance_.get(), args);
      } else {
        result = fn->invoke(args);
      }
    }
  } catch (const TypeMismatchError& e) {
    failure = Failure{proto::FailureKind::TYPE_MISMATCH, "lumen::TypeMismatchError", e.what(),
                      location};
  } catch (const ObjectLostError& e) {
    failure = Failure{proto::FailureKind::OBJECT_LOST, "lumen::ObjectLostError", e.what(),
                      location};
  } catch (const std::exception& e) {
    failure = Failure{proto::FailureKind::TASK_ERROR, codec::Demangle(typeid(e).name()), e.what(),
                      location};
  } catch (...) {
    failure = Failure{proto::FailureKind::TASK_ERROR, "unknown", "a non-std exception was thrown",
                      location};
  }
  in_task = false;

  auto reply = std::make_shared<OutMessage>();
  auto r = reply->Init().initTaskReply();
  r.setTaskId(DataOf(task.task_id));
  r.setAttempt(task.attempt);
  if (!failure && result.size() > options_.inline_limit) {
    ObjectId id = ObjectId::ForTaskReturn(task.task_id, 1);
    StoreResult created = CallStore(kCreate, id, result.size());
    if (created.status.code() == absl::StatusCode::kAlreadyExists) {
      // An earlier attempt stored it before dying: the value is the same, if it
      // got as far as sealing it.
      StoreResult sealed = CallStore(kGet, id, 0);
      if (sealed.status.ok()) {
        SendToNode([id](proto::Envelope::Builder env) {
          env.initStoreRelease().setObjectId(DataOf(id));
        });
      } else {
        failure = Failure{proto::FailureKind::OTHER, "",
                          absl::StrCat("an earlier attempt left the result unfinished: ",
                                       sealed.status.message()),
                          location};
      }
    } else if (!created.status.ok()) {
      failure = Failure{created.status.code() == absl::StatusCode::kResourceExhausted
                            ? proto::FailureKind::STORE_FULL
                            : proto::FailureKind::OTHER,
                        "", std::string(created.status.message()), location};
    } else {
      store_->PrefaultForWrite(created.offset, result.size());
      std::memcpy(store_->writable_base() + created.offset, result.data(), result.size());
      StoreResult sealed = CallStore(kSeal, id, result.size());
      if (!sealed.status.ok()) {
        failure = Failure{proto::FailureKind::OTHER, "", std::string(sealed.status.message()),
                          location};
      }
    }
    if (!failure) {
      auto stored = r.initResult().initStored();
      stored.setObjectId(DataOf(id));
      stored.setSize(result.size());
      stored.setNodeId(DataOf(node_id_));
      stored.setNodeAddress(node_address_);
    }
  }
  if (failure) {
    FailureToProto(*failure, r.initResult().initError());
  } else if (result.size() <= options_.inline_limit) {
    r.initResult().setInline(
        capnp::Data::Reader(reinterpret_cast<const uint8_t*>(result.data()), result.size()));
  }
  r.setExecMicros(static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                            std::chrono::steady_clock::now() - start)
                                            .count()));
  bool exiting = is_actor_ && this_call_exits;
  this_call_exits = false;
  if (exiting) r.setActorExiting(true);
  std::string frame;
  AppendFrame(reply->builder(), &frame);
  if (!exiting) {
    // The common case: the reply goes out from this thread, without waking the
    // io thread. (If this is the last reference, the connection is already
    // closed and dies here harmlessly.)
    if (auto conn = task.reply_to.lock()) {
      if (!conn->TrySendNow(frame)) PostToIo([conn] { conn->Flush(); });
    }
    return;
  }
  PostToIo([this, weak = task.reply_to, frame = std::move(frame), exiting] {
    if (auto conn = weak.lock()) conn->SendFramed(frame);
    if (exiting) {
      if (auto owner = actor_owner_conn_.lock()) {
        OutMessage out;
        out.Init().setActorExiting();
        owner->Send(out.builder());
      }
      ExitProcessWhenFlushed();
    }
  });
  if (exiting) {
    // No further calls run here; the io thread ends the process once the reply
    // is out.
    {
      absl::MutexLock lock(&exec_mu_);
      exec_blocked_ = true;
      exec_queue_.clear();
      exec_queue_size_.store(0);
    }
    absl::Notification never;
    never.WaitForNotification();
  }
}

}  // namespace lumen::runtime
