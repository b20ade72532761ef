// CoreWorker: the reference counter (local refs, borrowers, escaped refs;
// frees an object when nothing needs it). Thread-safe under mu_.
#include "lumen/worker/core_worker.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <typeinfo>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "core/worker/borrower_registry.h"
#include "core/worker/worker_state.h"
#include "lumen/common/codec.h"
#include "lumen/common/head_client.h"
#include "lumen/common/logging.h"
#include "lumen/common/process.h"
#include "lumen/common/proto_util.h"
#include "lumen/errors.h"
#include "lumen/objectstore/fd_passing.h"
#include "lumen/objectstore/object_table.h"

namespace lumen::runtime {

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
      e.SetFailed(Failure{proto::FailureKind::OBJECT_LOST, "",
                           absl::StrCat("object ", id.Hex(),
                                        " was freed by its owner before this reference to it "
                                        "was read"),
                           ""});
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
    capnp::Data::Reader data = DataOf(id);
    if (add) {
      env.setAddBorrower(data);
    } else {
      env.setRemoveBorrower(data);
    }
    conn->Send(out.builder());
  });
}

void CoreWorker::OnBorrowerChange(uint64_t conn_id, const ObjectId& id, int delta) {
  delta = borrowers_->Apply(conn_id, id, delta);
  if (delta != 0) ApplyBorrowerDelta(id, delta);
}

void CoreWorker::ApplyBorrowerDelta(const ObjectId& id, int delta) {
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

}  // namespace lumen::runtime
