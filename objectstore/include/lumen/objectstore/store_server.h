// StoreServer: the node's shared-memory object store as a service. It owns the
// segment and its ObjectTable, answers the store requests of local clients
// (create, seal, abort, get, release, delete), remembers which job created each
// object (only that job frees it; a job's objects go when it ends), and gives
// the transfer server and the pull manager their narrow ways in.
//
//   ASSIGN_OR_RETURN(auto store, StoreServer::Create(1ull << 30));
//   StoreCaller caller{.client = conn.id(), .job = job, .local = true};
//   ASSIGN_OR_RETURN(std::optional<StoreReply> reply, store->Handle(caller, msg));
//   if (reply) { OutMessage out; FillStoreReply(out.Init(), msg.getRequestId(), *reply); ... }
//
// Only on the node daemon's io thread (checked in debug builds).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lumen/common/ids.h"
#include "lumen/common/thread_checker.h"
#include "lumen/objectstore/object_table.h"
#include "lumen/objectstore/shm_segment.h"
#include "lumen/proto/lumen.capnp.h"

namespace lumen::objectstore {

// Store clients that are the daemon itself.
inline constexpr ClientId kPullClient = ~0ull;         // copies being pulled in
inline constexpr ClientId kTransferClient = ~0ull - 1;  // copies being served out

// Who sends a store request, as the daemon knows it from the client's hello.
struct StoreCaller {
  ClientId client = 0;
  JobId job;              // the job the objects it creates belong to
  bool local = false;     // a driver or worker of this node: may use every request
  bool detached = false;  // a detached actor: the objects it creates belong to no job
};

// The answer to one store request.
struct StoreReply {
  absl::Status status;
  uint64_t offset = 0;
  uint64_t size = 0;
};

// Fills `env` as the storeReply to request `request_id` (the one builder of it).
void FillStoreReply(proto::Envelope::Builder env, uint64_t request_id, const StoreReply& reply);

class StoreServer {
 public:
  // A store of `bytes` in a fresh shared-memory segment. Errors: the segment's.
  static absl::StatusOr<std::unique_ptr<StoreServer>> Create(uint64_t bytes);

  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  // Handles a store request (`msg` is a storeCreate/Seal/Abort/Get/Release/
  // Delete envelope). Returns the reply to send, or nullopt when none is due
  // (release, delete, a message that is no store request: logged). Errors
  // (PermissionDenied): the caller may not use the store; close its connection.
  // A remote caller may only delete (its job's objects).
  [[nodiscard]] absl::StatusOr<std::optional<StoreReply>> Handle(const StoreCaller& caller,
                                                                 proto::Envelope::Reader msg);

  // The client's connection closed: its pins go, its unsealed objects abort.
  void DisconnectClient(ClientId client);
  // The job ended: every object it created is deleted.
  void EndJob(const JobId& job);

  // For the transfer server: pins a sealed object (kTransferClient) and returns
  // its bytes; EndServeOut unpins it. Errors: as ObjectTable::Get.
  [[nodiscard]] absl::StatusOr<std::span<const uint8_t>> ServeOut(const ObjectId& id);
  void EndServeOut(const ObjectId& id);

  // For the pull manager: creates the object (kPullClient, belonging to `job`)
  // and returns where to write its `size` bytes; then SealPulledIn or
  // AbortPulledIn. Errors: as ObjectTable::Create.
  [[nodiscard]] absl::StatusOr<uint8_t*> BeginPullIn(const ObjectId& id, uint64_t size,
                                                     const JobId& job);
  [[nodiscard]] absl::Status SealPulledIn(const ObjectId& id);
  void AbortPulledIn(const ObjectId& id);

  bool IsSealed(const ObjectId& id) const;
  ObjectTable::Stats GetStats() const { return table_.GetStats(); }
  const ShmSegment& segment() const { return *segment_; }

 private:
  explicit StoreServer(std::unique_ptr<ShmSegment> segment);

  ThreadChecker io_thread_;
  std::unique_ptr<ShmSegment> segment_;
  ObjectTable table_;
  // Which job created each object (Nil: a detached actor's, freed by whoever owns it).
  absl::flat_hash_map<ObjectId, JobId> object_jobs_;
};

}  // namespace lumen::objectstore
