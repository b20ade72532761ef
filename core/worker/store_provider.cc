// StoreProvider: create/seal/abort/get/pull/release/delete against the node's
// shared-memory store (store_provider.h).
#include "core/worker/store_provider.h"

#include "absl/synchronization/notification.h"
#include "core/worker/io_poster.h"
#include "core/worker/outbound_connections.h"
#include "lumen/common/codec.h"
#include "lumen/common/control_retry.h"
#include "lumen/common/fault_injector.h"
#include "lumen/common/logging.h"
#include "lumen/common/proto_util.h"

namespace lumen::runtime {

StoreProvider::StoreProvider(IoPoster& poster, OutboundConnections& connections,
                             std::shared_ptr<Connection> node_conn,
                             std::shared_ptr<objectstore::ShmSegment> segment, Options options)
    : poster_(poster),
      connections_(connections),
      node_conn_(std::move(node_conn)),
      segment_(std::move(segment)),
      options_(std::move(options)),
      releaser_(std::make_shared<PinReleaser>()) {
  absl::MutexLock lock(&releaser_->mu);
  releaser_->provider = this;
}

StoreProvider::~StoreProvider() { Stop(); }

void StoreProvider::Stop() {
  closed_ = true;
  absl::MutexLock lock(&releaser_->mu);
  releaser_->provider = nullptr;
}

void StoreProvider::SendToNode(std::function<void(proto::Envelope::Builder)> fill) {
  poster_.Post("worker.send_to_node", [this, fill = std::move(fill)] {
    io_thread_.Check("StoreProvider::SendToNode");
    if (!node_conn_ || node_conn_->closed()) return;
    OutMessage out;
    fill(out.Init());
    node_conn_->Send(out.builder());
  });
}

struct StoreProvider::Call {
  absl::FunctionRef<void(proto::Envelope::Builder)> fill;
  StoreProvider* provider;  // who sends its attempts
  uint64_t request_id = 0;  // the same on every attempt
  int attempt = 0;          // of the attempt being sent, 0 first
  bool keyed = false;       // carries a key (the first attempt's, kept in `key`)
  bool resendable = false;  // keyed, or a pull
  bool drop = false;        // the fault injector loses this attempt's reply
  RetryKeyValue key;
  StoreResult result = StoreRegion{};
  absl::Notification done;
};

StoreResult StoreProvider::CallStore(Op op, const ObjectId& id, uint64_t size) {
  return CallNode([op, &id, size](proto::Envelope::Builder env) {
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

StoreResult StoreProvider::CallNode(absl::FunctionRef<void(proto::Envelope::Builder)> fill) {
  if (closed_) return absl::UnavailableError("lost the connection to the node daemon");
  Call call{.fill = fill, .provider = this};
  bool posted = poster_.Post("worker.call_node", [this, &call] {
    io_thread_.Check("StoreProvider::CallNode");
    SendAttempt(call);
  });
  if (!posted) {
    // Stop has begun: the request would never be sent, nor answered.
    return absl::UnavailableError("the runtime is shutting down");
  }
  call.done.WaitForNotification();
  return std::move(call.result);
}

void StoreProvider::SendAttempt(Call& call) {
  for (;;) {
    if (!node_conn_ || node_conn_->closed()) {
      call.result = absl::UnavailableError("lost the connection to the node daemon");
      call.done.Notify();
      return;
    }
    OutMessage out;
    auto env = out.Init();
    if (call.attempt == 0) call.request_id = connections_.NextRequestId();
    env.setRequestId(call.request_id);
    call.fill(env);
    if (call.attempt == 0) {
      if (env.isPullObject()) {
        call.resendable = true;  // idempotent: no key
      } else if (FaultInjector::Active()) {
        // Only an injected fault loses a reply on a live connection (a closed
        // one takes the client's pins and unsealed objects with it), so only
        // then is a request keyed: no key, no cost in the store's table.
        call.key = NewRetryKey();
        call.keyed = call.resendable = SetRetryKey(env, call.key);
      }
    } else if (call.keyed) {
      call.key.attempt = static_cast<uint32_t>(call.attempt);
      SetRetryKey(env, call.key);  // the first attempt's key
    }
    InjectedFault fault = InjectedFault::kNone;
    if (FaultInjector::Active() && call.attempt + 1 < kControlAttempts) {
      fault = FaultInjector::Draw(env.asReader());
    }
    if (fault == InjectedFault::kFailBeforeSend) {
      ++call.attempt;  // nothing written: the same request again
      continue;
    }
    // fail_in_flight is taken as drop_reply: dropping the connection would be
    // the loss of our node.
    call.drop = fault != InjectedFault::kNone;
    connections_.ExpectNodeReply(call.request_id, node_conn_->id(),
                                 [&call](proto::Envelope::Reader msg) {
                                   call.provider->OnReply(call, msg);
                                 });
    node_conn_->Send(out.builder());
    return;
  }
}

void StoreProvider::OnReply(Call& call, proto::Envelope::Reader msg) {
  if (!msg.isStoreReply()) {
    call.result = absl::UnavailableError("no reply from the node daemon");
    call.done.Notify();
    return;
  }
  if (call.drop) {
    // The injected loss: this answer never arrived.
    if (call.resendable) {
      ++call.attempt;
      SendAttempt(call);
      return;
    }
    call.result = absl::UnavailableError(
        "lost the node daemon's reply; not retried: the node may or may not have acted on the "
        "request");
    call.done.Notify();
    return;
  }
  auto r = msg.getStoreReply();
  if (r.getOk()) {
    call.result = StoreRegion{r.getOffset(), r.getSize()};
  } else {
    call.result = absl::Status(static_cast<absl::StatusCode>(r.getCode()), r.getError().cStr());
  }
  call.done.Notify();
}

absl::StatusOr<uint8_t*> StoreProvider::CreateWritable(const ObjectId& id, uint64_t size) {
  StoreResult created = CallStore(kCreate, id, size);
  if (!created.ok()) return created.status();
  segment_->PrefaultForWrite(created->offset, size);
  return segment_->writable_base() + created->offset;
}

absl::Status StoreProvider::Seal(const ObjectId& id, uint64_t size) {
  return CallStore(kSeal, id, size).status();
}

void StoreProvider::Abort(const ObjectId& id, uint64_t size) {
  StoreResult aborted = CallStore(kAbort, id, size);
  if (!aborted.ok()) {
    LUMEN_LOG(WARNING) << "aborting object " << id.Hex() << " failed: " << aborted.status();
  }
}

StoreResult StoreProvider::Get(const ObjectId& id) { return CallStore(kGet, id, 0); }

StoreResult StoreProvider::Pull(const ObjectId& id, uint64_t size, const NodeId& node,
                                const std::string& node_address) {
  return CallNode([&](proto::Envelope::Builder env) {
    auto pull = env.initPullObject();
    pull.setObjectId(DataOf(id));
    pull.setSize(size);
    pull.setNodeId(DataOf(node));
    pull.setNodeAddress(node_address);
    pull.setJobId(DataOf(options_.job_id));
  });
}

void StoreProvider::Release(const ObjectId& id) {
  SendToNode([id](proto::Envelope::Builder env) {
    env.initStoreRelease().setObjectId(DataOf(id));
  });
}

void StoreProvider::DeleteCopies(const ObjectId& id, std::vector<std::string> node_addresses) {
  if (node_addresses.empty()) node_addresses.push_back("");  // our node
  poster_.Post("worker.delete_copies", [this, id, node_addresses = std::move(node_addresses)] {
    io_thread_.Check("StoreProvider::DeleteCopies");
    for (const auto& address : node_addresses) {
      connections_.WithNode(address, [id](absl::StatusOr<std::shared_ptr<Connection>> conn) {
        if (!conn.ok() || !*conn || (*conn)->closed()) return;
        OutMessage out;
        out.Init().initStoreDelete().setObjectId(DataOf(id));
        (*conn)->Send(out.builder());
      });
    }
  });
}

internal::ObjectBytes StoreProvider::PinnedBytes(const ObjectId& id, uint64_t offset,
                                                 uint64_t size) {
  // The pin keeps the mapping alive and gives the object back to the store when
  // the last reader lets go, even if that happens after Shutdown.
  std::shared_ptr<objectstore::ShmSegment> segment = segment_;
  std::shared_ptr<PinReleaser> releaser = releaser_;
  std::shared_ptr<const void> pin(nullptr, [segment, releaser, id](const void*) {
    absl::MutexLock lock(&releaser->mu);
    if (releaser->provider == nullptr) return;
    releaser->provider->Release(id);
  });
  return internal::ObjectBytes{
      std::string_view(reinterpret_cast<const char*>(segment->readonly_base() + offset), size),
      std::move(pin)};
}

}  // namespace lumen::runtime
