// The object getter of one driver or worker process (Ray's
// CoreWorker::Get/Wait and its plasma provider's pull, smaller): Get and Wait
// of refs, and the bytes of one ready object. A value is looked up in the
// memory store (an inline value, a failure, or where a stored copy lies);
// a borrowed object not here is asked of its owner; a stored copy on
// another node is pulled to ours by our daemon, and the owner told of the new
// copy; a copy that cannot be read is reported to its owner, which says
// where the object is now (or rebuilds it), and the read is tried again.
//
//   ObjectGetter getter(table, memory_store, store, connections, poster, options, callbacks);
//   absl::StatusOr<std::vector<internal::ObjectBytes>> values =
//       getter.Get(refs, std::chrono::seconds(1));
//   absl::StatusOr<std::vector<bool>> ready = getter.Wait(refs, 1, std::nullopt);
//
// Failures are Statuses of their lumen::ErrorKind (lumen/common/error_kind.h):
// the CoreWorker facade throws them as the API's exceptions (api_error.h).
//
// Threads: Get, Wait, ReadyBytes and GetOrPull block their calling thread (a
// user thread or an executor thread, never the io thread); state shared with
// the io thread lives in the object table, under its lock.
// RequestObjectFromOwner runs on the io thread only (checked in debug
// builds). Internal to core/worker.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/worker/store_provider.h"
#include "lumen/common/ids.h"
#include "lumen/common/thread_checker.h"
#include "lumen/internal/runtime.h"

namespace lumen::runtime {

class IoPoster;             // core/worker/io_poster.h
class MemoryStore;          // core/worker/memory_store.h
class ObjectTable;          // core/worker/object_table.h
class OutboundConnections;  // core/worker/outbound_connections.h
struct ObjectEntry;         // core/worker/object_table.h

// Where an object is now, after its owner was told a copy could not be read
// (LostCopies): a stored copy (node, its address, size) or its inline bytes.
struct RecoveredCopy {
  NodeId node;
  std::string node_address;
  uint64_t size = 0;
  std::shared_ptr<const std::string> inline_value;  // set: not stored
};

class ObjectGetter {
 public:
  struct Options {
    NodeId node_id;              // ours
    std::string node_address;    // our node daemon's
    std::string listen_address;  // our owner service: the owner of what we own
    uint64_t generation = 0;     // CoreWorker::generation(): our RefHandles' entries
  };
  struct Callbacks {
    // Sends the task replies the calling executor thread holds back, before
    // it waits (the objects waited for may need them at their owner first).
    std::function<void()> flush_held_replies;
    // Tells `owner` that `id` could not be read at `node` (`why`) and waits
    // until it is ready again (LostCopies::RecoverFromOwner).
    std::function<absl::StatusOr<RecoveredCopy>(const ObjectId& id, const std::string& owner,
                                                const NodeId& node, const std::string& why)>
        recover_from_owner;
  };

  // The references outlive this.
  ObjectGetter(ObjectTable& table, MemoryStore& memory_store, StoreProvider& store,
               OutboundConnections& connections, IoPoster& poster, Options options,
               Callbacks callbacks);
  ObjectGetter(const ObjectGetter&) = delete;
  ObjectGetter& operator=(const ObjectGetter&) = delete;

  // The values of `refs` once all are ready (kGetTimeout when the timeout
  // passes first); else an object's failure (FailureStatus).
  [[nodiscard]] absl::StatusOr<std::vector<internal::ObjectBytes>> Get(
      const std::vector<const internal::RefHandle*>& refs,
      std::optional<std::chrono::milliseconds> timeout);
  // Which of `refs` are ready once `num_returns` are or the timeout passes
  // (kObjectLost for a ref this process does not know).
  [[nodiscard]] absl::StatusOr<std::vector<bool>> Wait(
      const std::vector<const internal::RefHandle*>& refs, size_t num_returns,
      std::optional<std::chrono::milliseconds> timeout);
  // The bytes of a ready object (pinned when stored), pulling a copy from
  // another node if needed; waits (until `deadline`, else kGetTimeout)
  // while it is being rebuilt from lineage. Else its failure, or kObjectLost /
  // kOwnerDied when no copy can be read.
  [[nodiscard]] absl::StatusOr<internal::ObjectBytes> ReadyBytes(
      const ObjectId& id,
      std::optional<std::chrono::steady_clock::time_point> deadline = std::nullopt);
  // Pins a stored object in our node's store, first copying it from `node`
  // when it is not here; tells `owner` of the new copy.
  [[nodiscard]] StoreResult GetOrPull(const ObjectId& id, uint64_t size, const NodeId& node,
                                      const std::string& node_address, const std::string& owner);
  // io thread: asks `owner` for the value of the borrowed object `id`; its
  // answer (or the owner's death) goes into the memory store.
  void RequestObjectFromOwner(const ObjectId& id, const std::string& owner);

 private:
  // A ref's entry when its handle was made by this runtime, else nullptr (a
  // handle made by an earlier runtime, before Shutdown and Init, is looked up).
  ObjectEntry* KnownEntry(const internal::RefHandle& ref) const {
    return ref.runtime_generation() == options_.generation ? ref.entry() : nullptr;
  }
  std::vector<ObjectEntry*> KnownEntries(const std::vector<const internal::RefHandle*>& refs) const;
  // Waits until `num_ready` of `refs` are ready or the timeout passes;
  // `known` as for MemoryStore::AwaitReady.
  [[nodiscard]] absl::StatusOr<std::vector<ObjectEntry*>> AwaitReady(
      const std::vector<const internal::RefHandle*>& refs, size_t num_ready,
      std::optional<std::chrono::milliseconds> timeout, const std::vector<ObjectEntry*>& known);

  ObjectTable& table_;
  MemoryStore& memory_store_;
  StoreProvider& store_;
  OutboundConnections& connections_;
  IoPoster& poster_;
  const Options options_;
  const Callbacks callbacks_;
  ThreadChecker io_thread_;
};

}  // namespace lumen::runtime
