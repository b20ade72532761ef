// CoreWorker: the object getter (memory store -> owner -> pull, retrying
// other copies) and the failures it throws at the API.
#include "lumen/worker/core_worker.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <typeinfo>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
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

void CoreWorker::ThrowFailure(const Failure& f) {
  if (f.cancelled) throw TaskCancelledError(f.message);
  switch (f.kind) {
    case proto::FailureKind::TASK_ERROR:
    case proto::FailureKind::FUNCTION_NOT_FOUND:
      throw TaskError(
          absl::StrCat(f.exception_type.empty() ? "" : f.exception_type + ": ", f.message,
                       f.location.empty() ? "" : " (in " + f.location + ")"),
          f.exception_type, f.message, f.location);
    case proto::FailureKind::WORKER_CRASHED:
      if (f.exception_type == kOutOfMemoryErrorType) throw OutOfMemoryError(f.message);
      throw WorkerCrashedError(f.message);
    case proto::FailureKind::OBJECT_LOST:
      if (f.exception_type == kOwnerDiedErrorType) throw OwnerDiedError(f.message);
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
    PostToIo("worker.report_new_copy", [this, id, owner, here, here_address] {
      if (owner == listen_address_) {
        OnObjectLocationAdded(id, here, here_address);
        return;
      }
      connections_->WithPeer(owner, [id, here, here_address](absl::StatusOr<std::shared_ptr<Connection>> conn) {
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

internal::ObjectBytes CoreWorker::ReadyBytes(
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
      ObjectTable::Locked objects(*object_table_);
      auto it = objects->find(id);
      if (it == objects->end()) throw ObjectLostError("object " + id.Hex() + " is not known");
      ready = it->second.ready.load(std::memory_order_acquire);
      kind = it->second.kind;
      value = it->second.value;
      if (it->second.failure) failure = *it->second.failure;
      size = it->second.stored_size;
      if (!it->second.locations.empty()) location = it->second.locations.front();
      owner = it->second.owned ? listen_address_ : it->second.owner_address;
    }
    if (!ready) {
      // Being rebuilt from lineage: wait for the new value, then read it afresh.
      std::optional<std::chrono::milliseconds> left;
      if (deadline) {
        left = std::max(std::chrono::milliseconds(0),
                        std::chrono::duration_cast<std::chrono::milliseconds>(
                            *deadline - std::chrono::steady_clock::now()));
      }
      auto entries = memory_store_->AwaitReady({id}, 1, left);
      if (!entries[0]->ready) {
        throw GetTimeoutError(absl::StrCat("Get timed out after ", left ? left->count() : 0,
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
    const absl::StatusCode code = got.status.code();
    if (owner.empty() || code == absl::StatusCode::kResourceExhausted ||
        code == absl::StatusCode::kPermissionDenied) {
      continue;
    }
    // That copy could not be read: the owner (maybe us) forgets it, rebuilds
    // the object from its lineage when no copy is left, and says where it is
    // now (lost_copies.cc).
    auto copy = RecoverFromOwner(id, owner, location.first, last_error);
    if (!copy.ok()) {
      if (copy.status().code() == absl::StatusCode::kUnavailable) {
        throw OwnerDiedError(absl::StrCat("object ", id.Hex(), " is lost: ", last_error, "; ",
                                          copy.status().message()));
      }
      throw ObjectLostError(absl::StrCat("object ", id.Hex(), " is lost: ",
                                         copy.status().message()));
    }
    if (copy->inline_value) return internal::ObjectBytes{*copy->inline_value, copy->inline_value};
    if (owner != listen_address_) {
      // A borrowed entry: read the new copy next (the owner's entry is its own).
      ObjectTable::Locked objects(*object_table_);
      auto it = objects->find(id);
      if (it != objects->end() && it->second.kind == ObjectEntry::Kind::kStored) {
        it->second.locations = {{copy->node, copy->node_address}};
        it->second.stored_size = copy->size;
      }
    }
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

void CoreWorker::RequestObjectFromOwner(const ObjectId& id, const std::string& owner) {
  connections_->WithPeer(owner, [this, id](absl::StatusOr<std::shared_ptr<Connection>> conn) {
    if (!conn.ok()) {
      memory_store_->SetFailed(id, Failure{proto::FailureKind::OBJECT_LOST, kOwnerDiedErrorType,
                                           absl::StrCat("the owner of object ", id.Hex(),
                                                        " is unreachable (it died): ",
                                                        conn.status().message()),
                                           ""});
      return;
    }
    connections_->SendPeerRequest(
        **conn, [&](proto::Envelope::Builder env) { env.setWaitObject(DataOf(id)); },
        [this, id](proto::Envelope::Reader msg) {
          if (!msg.isObjectStatus()) return;
          memory_store_->SetFromValue(id, msg.getObjectStatus().getValue(),
                                      /*owned_result=*/false);
        });
  });
}

// ---------------------------------------------------------------------------
// Get / Wait

std::vector<ObjectEntry*> CoreWorker::KnownEntries(
    const std::vector<const internal::RefHandle*>& refs) const {
  std::vector<ObjectEntry*> known(refs.size());
  for (size_t i = 0; i < refs.size(); ++i) known[i] = KnownEntry(*refs[i]);
  return known;
}

std::vector<ObjectEntry*> CoreWorker::AwaitReady(
    const std::vector<const internal::RefHandle*>& refs, size_t num_ready,
    std::optional<std::chrono::milliseconds> timeout, const std::vector<ObjectEntry*>& known) {
  // What this executor thread holds back goes before any wait (Get, Wait, an
  // actor call's result): the objects waited for may need it at the owner.
  FlushHeldReplies();
  std::vector<ObjectId> ids;
  ids.reserve(refs.size());
  for (const auto* ref : refs) ids.push_back(ref->id());
  return memory_store_->AwaitReady(ids, num_ready, timeout, known);
}

std::vector<internal::ObjectBytes> CoreWorker::Get(
    const std::vector<const internal::RefHandle*>& refs,
    std::optional<std::chrono::milliseconds> timeout) {
  std::optional<std::chrono::steady_clock::time_point> deadline;
  if (timeout) deadline = std::chrono::steady_clock::now() + *timeout;
  auto entries = AwaitReady(refs, refs.size(), timeout, KnownEntries(refs));
  for (size_t i = 0; i < entries.size(); ++i) {
    if (!entries[i]->ready) {
      throw GetTimeoutError(absl::StrCat("Get timed out after ", timeout->count(),
                                         " ms waiting for object ", refs[i]->id().Hex()));
    }
  }
  std::vector<internal::ObjectBytes> out;
  out.reserve(refs.size());
  for (const auto* ref : refs) out.push_back(ReadyBytes(ref->id(), deadline));
  return out;
}

std::vector<bool> CoreWorker::Wait(const std::vector<const internal::RefHandle*>& refs,
                                   size_t num_returns,
                                   std::optional<std::chrono::milliseconds> timeout) {
  // Enough ready already (a loop waiting on the rest of a list it drains):
  // one atomic load per ref, no lock, nothing registered.
  std::vector<bool> ready;
  std::optional<size_t> now = MemoryStore::ReadyWithoutLock(
      refs.size(), [&](size_t i) { return KnownEntry(*refs[i]); }, ready, num_returns);
  if (now && *now >= num_returns) return ready;
  auto entries = AwaitReady(refs, num_returns, timeout, KnownEntries(refs));
  for (size_t i = 0; i < entries.size(); ++i) ready[i] = entries[i]->ready.load();
  return ready;
}

}  // namespace lumen::runtime
