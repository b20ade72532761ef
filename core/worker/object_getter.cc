// ObjectGetter: memory store -> owner -> pull, retrying other copies
// (object_getter.h); a failure is a Status of its kind (error_kind.h).
#include "core/worker/object_getter.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/worker/io_poster.h"
#include "core/worker/memory_store.h"
#include "core/worker/object_table.h"
#include "core/worker/object_value.h"
#include "core/worker/outbound_connections.h"
#include "lumen/common/codec.h"
#include "lumen/common/error_kind.h"
#include "lumen/common/failure_types.h"
#include "lumen/common/proto_util.h"
#include "lumen/common/timeouts.h"

namespace lumen::runtime {
ObjectGetter::ObjectGetter(ObjectTable& table, MemoryStore& memory_store, StoreProvider& store,
                           OutboundConnections& connections, IoPoster& poster, Options options,
                           Callbacks callbacks)
    : table_(table),
      memory_store_(memory_store),
      store_(store),
      connections_(connections),
      poster_(poster),
      options_(std::move(options)),
      callbacks_(std::move(callbacks)) {}

StoreResult ObjectGetter::GetOrPull(const ObjectId& id, uint64_t size, const NodeId& node,
                                    const std::string& node_address, const std::string& owner) {
  StoreResult got = store_.Get(id);
  // NotFound: not here; Unavailable: being pulled here by another reader.
  bool absent = got.status().code() == absl::StatusCode::kNotFound ||
                got.status().code() == absl::StatusCode::kUnavailable;
  if (got.ok() || !absent || node.IsNil() || node == options_.node_id ||
      node_address.empty()) {
    return got;
  }
  // Another node has it: our daemon copies it here (once, however many ask).
  StoreResult pulled = store_.Pull(id, size, node, node_address);
  if (!pulled.ok()) return pulled;
  got = store_.Get(id);
  if (got.ok() && !owner.empty()) {
    NodeId here = options_.node_id;
    std::string here_address = options_.node_address;
    poster_.Post("worker.report_new_copy", [this, id, owner, here, here_address] {
      io_thread_.Check("ObjectGetter::GetOrPull");
      if (owner == options_.listen_address) {
        memory_store_.AddLocation(id, here, here_address);
        return;
      }
      connections_.WithPeer(
          owner, [id, here, here_address](absl::StatusOr<std::shared_ptr<Connection>> conn) {
            if (!conn.ok()) return;
            OutMessage out;
            auto location = out.Init().initAddObjectLocation();
            location.setObjectId(DataOf(id));
            location.setNodeId(DataOf(here));
            location.setNodeAddress(here_address);
            (*conn)->Send(out.builder());
          });
    });
  }
  return got;
}

absl::StatusOr<internal::ObjectBytes> ObjectGetter::ReadyBytes(
    const ObjectId& id, std::optional<std::chrono::steady_clock::time_point> deadline) {
  // A copy can vanish with its node while we read: when our node says so (it
  // tells us of the death before it answers the pull), the entry names another
  // copy, is pending again (its task runs again: lineage reconstruction), or
  // says the object is lost, and we look again.
  std::pair<NodeId, std::string> tried;
  std::string last_error;
  for (int attempt = 0;; ++attempt) {
    ObjectEntry::Kind kind;
    std::shared_ptr<const std::string> value;
    Failure failure;
    std::pair<NodeId, std::string> location;
    uint64_t size = 0;
    std::string owner;
    bool ready;
    {
      ObjectTable::Locked objects(table_);
      auto it = objects->find(id);
      if (it == objects->end()) {
        return ErrorStatus(ErrorKind::kObjectLost, "object " + id.Hex() + " is not known");
      }
      ready = it->second.ready.load(std::memory_order_acquire);
      kind = it->second.kind;
      value = it->second.value;
      if (it->second.failure) failure = *it->second.failure;
      size = it->second.stored_size;
      if (kind == ObjectEntry::Kind::kStored) {  // only a stored copy needs where and whose
        if (!it->second.locations.empty()) location = it->second.locations.front();
        owner = it->second.owned ? options_.listen_address : it->second.owner_address;
      }
    }
    if (!ready) {
      // Being rebuilt from lineage: wait for the new value, then read it afresh.
      std::optional<std::chrono::milliseconds> left;
      if (deadline) {
        left = std::max(std::chrono::milliseconds(0),
                        std::chrono::duration_cast<std::chrono::milliseconds>(
                            *deadline - std::chrono::steady_clock::now()));
      }
      auto entries = memory_store_.AwaitReady({id}, 1, left);
      if (!entries.ok()) return entries.status();
      if (!(*entries)[0]->ready) {
        return ErrorStatus(ErrorKind::kGetTimeout,
                           absl::StrCat("Get timed out after ", left ? left->count() : 0,
                                        " ms more waiting for object ", id.Hex(),
                                        ", which is being rebuilt from its lineage"));
      }
      tried = {};
      attempt = -1;
      continue;
    }
    switch (kind) {
      case ObjectEntry::Kind::kInline:
        return internal::ObjectBytes{*value, value};
      case ObjectEntry::Kind::kFailed:
        return FailureStatus(failure);
      case ObjectEntry::Kind::kStored:
        break;
    }
    if (attempt > 0 && location == tried) {
      return ErrorStatus(ErrorKind::kObjectLost,
                         absl::StrCat("object ", id.Hex(), " is lost: ", last_error));
    }
    tried = location;
    StoreResult got = GetOrPull(id, size, location.first, location.second, owner);
    if (got.ok()) {
      // The pin is released when the last reader of these bytes lets go.
      return store_.PinnedBytes(id, got->offset, got->size);
    }
    last_error = std::string(got.status().message());
    if (attempt >= 3) {
      return ErrorStatus(ErrorKind::kObjectLost,
                         absl::StrCat("object ", id.Hex(), " is lost: ", last_error));
    }
    const absl::StatusCode code = got.status().code();
    if (owner.empty() || code == absl::StatusCode::kResourceExhausted ||
        code == absl::StatusCode::kPermissionDenied) {
      continue;
    }
    // That copy could not be read: the owner (maybe us) forgets it, rebuilds
    // the object from its lineage when no copy is left, and says where it is
    // now (lost_copies.cc).
    auto copy = callbacks_.recover_from_owner(id, owner, location.first, last_error);
    if (!copy.ok()) {
      if (copy.status().code() == absl::StatusCode::kUnavailable) {
        return ErrorStatus(ErrorKind::kOwnerDied,
                           absl::StrCat("object ", id.Hex(), " is lost: ", last_error, "; ",
                                        copy.status().message()));
      }
      return ErrorStatus(ErrorKind::kObjectLost,
                         absl::StrCat("object ", id.Hex(), " is lost: ", copy.status().message()));
    }
    if (copy->inline_value) return internal::ObjectBytes{*copy->inline_value, copy->inline_value};
    if (owner != options_.listen_address) {
      // A borrowed entry: read the new copy next (the owner's entry is its own).
      ObjectTable::Locked objects(table_);
      auto it = objects->find(id);
      if (it != objects->end() && it->second.kind == ObjectEntry::Kind::kStored) {
        it->second.locations = {{copy->node, copy->node_address}};
        it->second.stored_size = copy->size;
      }
    }
  }
}

void ObjectGetter::RequestObjectFromOwner(const ObjectId& id, const std::string& owner) {
  io_thread_.Check("ObjectGetter::RequestObjectFromOwner");
  connections_.WithPeer(owner, [this, id](absl::StatusOr<std::shared_ptr<Connection>> conn) {
    if (!conn.ok()) {
      memory_store_.SetFailed(
          id, Failure{proto::FailureKind::OBJECT_LOST, kOwnerDiedErrorType,
                      absl::StrCat("the owner of object ", id.Hex(),
                                   " is unreachable (it died): ", conn.status().message()),
                      ""});
      return;
    }
    connections_.SendPeerRequest(
        **conn, [&](proto::Envelope::Builder env) { env.setWaitObject(DataOf(id)); },
        [this, id](proto::Envelope::Reader msg) {
          if (!msg.isObjectStatus()) return;
          memory_store_.SetFromValue(id, msg.getObjectStatus().getValue(),
                                     /*owned_result=*/false);
        });
  });
}

// ---------------------------------------------------------------------------
// Get / Wait

std::vector<ObjectEntry*> ObjectGetter::KnownEntries(
    const std::vector<const internal::RefHandle*>& refs) const {
  std::vector<ObjectEntry*> known(refs.size());
  for (size_t i = 0; i < refs.size(); ++i) known[i] = KnownEntry(*refs[i]);
  return known;
}

absl::StatusOr<std::vector<ObjectEntry*>> ObjectGetter::AwaitReady(
    const std::vector<const internal::RefHandle*>& refs, size_t num_ready,
    std::optional<std::chrono::milliseconds> timeout, const std::vector<ObjectEntry*>& known) {
  // What this executor thread holds back goes before any wait (Get, Wait, an
  // actor call's result): the objects waited for may need it at the owner.
  callbacks_.flush_held_replies();
  std::vector<ObjectId> ids;
  ids.reserve(refs.size());
  for (const auto* ref : refs) ids.push_back(ref->id());
  return memory_store_.AwaitReady(ids, num_ready, timeout, known);
}

absl::StatusOr<std::vector<internal::ObjectBytes>> ObjectGetter::Get(
    const std::vector<const internal::RefHandle*>& refs,
    std::optional<std::chrono::milliseconds> timeout) {
  std::optional<std::chrono::steady_clock::time_point> deadline;
  if (timeout) deadline = DeadlineAfter(*timeout);
  auto entries = AwaitReady(refs, refs.size(), timeout, KnownEntries(refs));
  if (!entries.ok()) return entries.status();
  for (size_t i = 0; i < entries->size(); ++i) {
    if (!(*entries)[i]->ready) {
      return ErrorStatus(ErrorKind::kGetTimeout,
                         absl::StrCat("Get timed out after ", timeout->count(),
                                      " ms waiting for object ", refs[i]->id().Hex()));
    }
  }
  std::vector<internal::ObjectBytes> out;
  out.reserve(refs.size());
  for (const auto* ref : refs) {
    absl::StatusOr<internal::ObjectBytes> bytes = ReadyBytes(ref->id(), deadline);
    if (!bytes.ok()) return bytes.status();
    out.push_back(*std::move(bytes));
  }
  return out;
}

absl::StatusOr<std::vector<bool>> ObjectGetter::Wait(
    const std::vector<const internal::RefHandle*>& refs, size_t num_returns,
    std::optional<std::chrono::milliseconds> timeout) {
  // Enough ready already (a loop waiting on the rest of a list it drains):
  // one atomic load per ref, no lock, nothing registered.
  std::vector<bool> ready;
  std::optional<size_t> now = MemoryStore::ReadyWithoutLock(
      refs.size(), [&](size_t i) { return KnownEntry(*refs[i]); }, ready, num_returns);
  if (now && *now >= num_returns) return ready;
  auto entries = AwaitReady(refs, num_returns, timeout, KnownEntries(refs));
  if (!entries.ok()) return entries.status();
  for (size_t i = 0; i < entries->size(); ++i) ready[i] = (*entries)[i]->ready.load();
  return ready;
}

}  // namespace lumen::runtime
