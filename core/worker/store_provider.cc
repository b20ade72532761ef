// CoreWorker: the store provider (create/seal/abort/get/delete against the
// node's shared-memory store) and Put.
#include "lumen/worker/core_worker.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <typeinfo>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "core/worker/call_sites.h"
#include "core/worker/worker_state.h"
#include "lumen/common/codec.h"
#include "lumen/common/head_client.h"
#include "lumen/common/logging.h"
#include "lumen/common/process.h"
#include "lumen/common/proto_util.h"
#include "lumen/common/stream_copy.h"
#include "lumen/errors.h"
#include "lumen/objectstore/fd_passing.h"
#include "lumen/objectstore/object_table.h"

namespace lumen::runtime {

// ---------------------------------------------------------------------------
// Node daemon requests

void CoreWorker::SendToNode(std::function<void(proto::Envelope::Builder)> fill) {
  PostToIo("worker.send_to_node", [this, fill = std::move(fill)] {
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
  bool posted = PostToIo("worker.call_node", [&] {
    if (!node_conn_ || node_conn_->closed()) {
      result.status = absl::UnavailableError("lost the connection to the node daemon");
      done.Notify();
      return;
    }
    connections_->SendNodeRequest(*node_conn_, fill, [&](proto::Envelope::Reader msg) {
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
  if (!posted) {
    // Stop has begun: the request would never be sent, nor answered.
    result.status = absl::UnavailableError("the runtime is shutting down");
    return result;
  }
  done.WaitForNotification();
  return result;
}

void CoreWorker::DeleteCopies(const ObjectId& id, std::vector<std::string> node_addresses) {
  if (node_addresses.empty()) node_addresses.push_back("");  // our node
  PostToIo("worker.delete_copies", [this, id, node_addresses = std::move(node_addresses)] {
    for (const auto& address : node_addresses) {
      connections_->WithNode(address, [id](absl::StatusOr<std::shared_ptr<Connection>> conn) {
        if (!conn.ok() || !*conn || (*conn)->closed()) return;
        OutMessage out;
        out.Init().initStoreDelete().setObjectId(DataOf(id));
        (*conn)->Send(out.builder());
      });
    }
  });
}

void CoreWorker::OnObjectLocationAdded(const ObjectId& id, const NodeId& node,
                                       const std::string& address) {
  ObjectTable::Locked objects(*object_table_);
  auto it = objects->find(id);
  if (it != objects->end() && (!it->second.owned || it->second.kind != ObjectEntry::Kind::kStored)) {
    return;  // not ours to track
  }
  if (it == objects->end()) {
    DeleteCopies(id, {address});  // freed meanwhile: the new copy goes too
    return;
  }
  for (const auto& [n, a] : it->second.locations)
    if (n == node) return;
  it->second.locations.emplace_back(node, address);
}

// ---------------------------------------------------------------------------
// Put / Get / Wait

std::shared_ptr<internal::RefHandle> CoreWorker::PutEncoded(std::string encoded,
                                                          const std::source_location& where) {
  if (encoded.size() > options_.inline_limit) {
    return PutWithWriter(
        encoded.size(), [&](uint8_t* out) { CopyBytes(out, encoded.data(), encoded.size()); },
        where);
  }
  ObjectId id = ObjectId::ForPut();
  auto handle = std::make_shared<internal::RefHandle>(id, shared_listen_address_);
  auto value = std::make_shared<const std::string>(std::move(encoded));
  memory_store_->SetReady(id, [&](ObjectEntry& e) {
    e.kind = ObjectEntry::Kind::kInline;
    e.value = value;
  });
  return handle;
}

std::shared_ptr<internal::RefHandle> CoreWorker::PutWithWriter(
    uint64_t size, const std::function<void(uint8_t*)>& write, const std::source_location& where) {
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
  auto handle = std::make_shared<internal::RefHandle>(id, shared_listen_address_);
  const std::string* site = CallSites::OfPut(where);  // before the table's lock
  memory_store_->SetReady(id, [&](ObjectEntry& e) {
    e.kind = ObjectEntry::Kind::kStored;
    e.stored_size = size;
    e.locations = {{node_id_, node_address_}};
    e.call_site = site;
  });
  return handle;
}

}  // namespace lumen::runtime
