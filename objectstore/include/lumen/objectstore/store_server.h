// StoreServer: the node's shared-memory object store as a service. It owns the
// segment and its ObjectTable, answers the store requests of local clients
// (create, seal, abort, get, release, delete), remembers which job created each
// object (only that job frees it; a job's objects go when it ends), makes room
// when the store is full (evicts secondary copies, spills primary copies to
// files, restores them on Get), and gives the transfer server and the pull
// manager their narrow ways in.
//
//   ASSIGN_OR_RETURN(auto store, StoreServer::Create(StoreOptions{
//       .bytes = 1ull << 30, .spill_dir = session_dir, .io = &io}));
//   StoreCaller caller{.client = conn.id(), .job = job, .local = true};
//   RETURN_IF_ERROR(store->Handle(caller, msg, [&](const StoreReply& reply) {
//     OutMessage out; FillStoreReply(out.Init(), msg.getRequestId(), reply); ...
//   }));
//
// A create that does not fit is parked, not failed, while the store makes
// room: first secondary copies (pulled from other nodes) are dropped and
// objects that already have a disk copy are evicted, then unpinned primary
// copies are spilled, lowest offset first (so one contiguous hole forms), in
// batches of several objects per file written by a background SpillWorker.
// A parked create fails with ResourceExhausted (ObjectStoreFullError) only
// when no room appeared within `full_grace`; one larger than the whole store
// fails at once. Pinned objects (any client's Get, an unsealed object) are
// never evicted or spilled. A Get of a spilled object restores it first.
//
// Only on the node daemon's io thread (checked in debug builds); replies run
// on it, possibly after Handle returned.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lumen/common/ids.h"
#include "lumen/common/thread_checker.h"
#include "lumen/objectstore/object_records.h"
#include "lumen/objectstore/object_table.h"
#include "lumen/objectstore/segment_reserver.h"
#include "lumen/objectstore/shm_segment.h"
#include "lumen/objectstore/spill_index.h"
#include "lumen/objectstore/spill_worker.h"
#include "lumen/objectstore/store_region.h"
#include "lumen/objectstore/store_repeats.h"
#include "lumen/proto/lumen.capnp.h"

namespace lumen::objectstore {

// Store clients that are the daemon itself.
inline constexpr ClientId kPullClient = ~0ull;         // copies being pulled in
inline constexpr ClientId kTransferClient = ~0ull - 1;  // copies being served out
inline constexpr ClientId kSpillClient = ~0ull - 2;     // objects being written to disk
inline constexpr ClientId kRestoreClient = ~0ull - 3;   // objects being read back

// How long a create that does not fit waits for room by default
// (LUMEN_OBJECT_STORE_FULL_GRACE_MS overrides it).
inline constexpr std::chrono::milliseconds kDefaultFullGrace{5000};

// How long after its start a node's store begins its background reservation
// by default (LUMEN_OBJECT_STORE_RESERVE_DELAY_MS overrides it): the node's
// start, a driver's Init and the first workers' start come first.
inline constexpr std::chrono::milliseconds kDefaultReserveDelay{1000};

struct StoreOptions {
  uint64_t bytes = 0;     // capacity of the segment
  // Spill files go to a fresh subdirectory of it (created on the first
  // spill, removed by Stop and the destructor). Empty: spilling is off.
  std::string spill_dir;
  std::chrono::milliseconds full_grace = kDefaultFullGrace;
  boost::asio::io_context* io = nullptr;  // the owner's loop (timers, completions); required
  // When the segment's pages are reserved (fallocate). Whatever the choice,
  // a create reserves its own range first, so a write never meets SIGBUS.
  enum class Reserve {
    kBackground,  // all of them, on a SegmentReserver thread from the start (default)
    kAtStart,     // all of them before Create returns (fails if they cannot be)
    kPerObject,   // only the ranges of the objects created
  };
  Reserve reserve = Reserve::kBackground;
  // kBackground: the reserving thread starts this long after Create, on the
  // io loop's timer (0: at once). Until then, as after, each create reserves
  // its own range.
  std::chrono::milliseconds reserve_delay{0};

  // full_grace from LUMEN_OBJECT_STORE_FULL_GRACE_MS, reserve from
  // LUMEN_OBJECT_STORE_RESERVE (background | start | object; 1 = start,
  // 0 = object), reserve_delay from LUMEN_OBJECT_STORE_RESERVE_DELAY_MS
  // (default kDefaultReserveDelay); the rest as given.
  static StoreOptions FromEnv(uint64_t bytes, const std::string& spill_dir,
                              boost::asio::io_context* io);
};

// What the store did to make room, for stats, tests and benchmarks.
struct SpillStats {
  uint64_t spilled_objects = 0;   // written to disk (cumulative)
  uint64_t spilled_bytes = 0;
  uint64_t restored_objects = 0;  // read back (cumulative)
  uint64_t restored_bytes = 0;
  uint64_t evicted_secondary = 0; // secondary copies dropped
  uint64_t on_disk_objects = 0;   // live objects with a disk copy now
  uint64_t on_disk_bytes = 0;
  uint64_t spill_files = 0;       // files now
  uint64_t parked_creates = 0;    // waiting for room now
  uint64_t spilling_bytes = 0;    // being written now (pinned by the store meanwhile)
  uint64_t failed_creates = 0;    // ObjectStoreFullError after the grace (cumulative)
};

// One object of the store as `lumen memory` lists it: in memory, on disk, or both.
struct StoreObjectInfo {
  ObjectId id;
  uint64_t size = 0;
  const char* state = "";  // CREATED, SEALED, DELETE_PENDING, or SPILLED (on disk only)
  uint64_t pins = 0;       // Get pins (the store's own while it spills included), +1 while unsealed
  bool on_disk = false;    // a disk copy exists (SPILLED, or restored and kept on disk)
  bool secondary = false;  // a copy pulled from another node
  JobId job;               // who frees it (Nil: a detached actor's)
};

// Who sends a store request, as the daemon knows it from the client's hello.
struct StoreCaller {
  ClientId client = 0;
  JobId job;              // the job the objects it creates belong to
  bool local = false;     // a driver or worker of this node: may use every request
  bool detached = false;  // a detached actor: the objects it creates belong to no job
  // Who owns the objects it creates, as the daemon's id of the owner's
  // connection: they go when that connection closes (OwnerGone). 0: unknown,
  // they go with their job.
  ClientId owner = 0;
};

// The answer to one store request: the region for create and get, an empty
// one for seal and abort. (The wire's storeReply has room for both a status
// and a region; an error's region is left zero.)
using StoreReply = absl::StatusOr<StoreRegion>;

// The reply of a request without a region (seal, abort, a pull): `status`, or
// an empty region when it is OK.
[[nodiscard]] StoreReply ReplyOf(const absl::Status& status);

// Fills `env` as the storeReply to request `request_id` (the one builder of it).
void FillStoreReply(proto::Envelope::Builder env, uint64_t request_id, const StoreReply& reply);

class StoreServer {
 public:
  // Runs once with the answer to a request that needs one (on the io thread).
  using ReplyFn = std::function<void(const StoreReply&)>;

  // A store of `options.bytes` in a fresh shared-memory segment. Errors: the
  // segment's; ResourceExhausted naming the shortfall when the segment is
  // larger than the memory this machine (or this container's cgroup) has
  // available, or, with Reserve::kAtStart, when its pages cannot all be
  // reserved.
  static absl::StatusOr<std::unique_ptr<StoreServer>> Create(StoreOptions options);

  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  // Handles a store request (`msg` is a storeCreate/Seal/Abort/Get/Release/
  // Delete envelope). `reply` runs once for create, seal, abort and get (a
  // create waiting for room and a get of a spilled object answer later), never
  // for release and delete and messages that are no store requests (logged).
  // Errors (PermissionDenied): the caller may not use the store; close its
  // connection. A remote caller may only delete (its job's objects). A
  // create, seal, abort or get that carries a RetryKey has its answer kept
  // (StoreRepeats); a resend of it (attempt > 0) on the same connection gets
  // that answer and changes nothing.
  [[nodiscard]] absl::Status Handle(const StoreCaller& caller, proto::Envelope::Reader msg,
                                    ReplyFn reply);

  // The client's connection closed: its pins go, its unsealed objects abort,
  // its parked requests are dropped unanswered.
  void DisconnectClient(ClientId client);
  // The job ended: every object it created is deleted (disk copies too).
  void EndJob(const JobId& job);
  // The owner whose connection is `owner` is gone (it died, or ended): every
  // primary copy it owns is deleted (disk copies too); one a reader still
  // pins goes when the last pin is released. O(that owner's objects).
  void OwnerGone(ClientId owner);

  // For the transfer server: pins a sealed object (kTransferClient) and returns
  // its bytes; EndServeOut unpins it. A spilled object is not served:
  // Aborted (retry soon), and its restore starts. Errors: as ObjectTable::Get.
  [[nodiscard]] absl::StatusOr<std::span<const uint8_t>> ServeOut(const ObjectId& id);
  void EndServeOut(const ObjectId& id);

  // For the pull manager: creates the object (kPullClient, a secondary copy
  // belonging to `job`) once there is room and passes where to write its
  // `size` bytes to `done` (on the io thread; later when parked); then
  // SealPulledIn or AbortPulledIn. Errors: as a client's create.
  using PullInFn = std::function<void(absl::StatusOr<uint8_t*>)>;
  void BeginPullIn(const ObjectId& id, uint64_t size, const JobId& job, PullInFn done);
  [[nodiscard]] absl::Status SealPulledIn(const ObjectId& id);
  void AbortPulledIn(const ObjectId& id);

  // The node stops: queued disk I/O is dropped, parked requests are dropped,
  // and every spill file and the spill directory are removed. Idempotent.
  void Stop();

  bool IsSealed(const ObjectId& id) const;
  ObjectTable::Stats GetStats() const { return table_.GetStats(); }
  SpillStats GetSpillStats() const;
  uint64_t PinnedBytes() const { return table_.PinnedBytes(); }
  // Resent requests answered from the table of kept answers (cumulative).
  uint64_t RepeatedRequests() const { return repeats_.replayed(); }
  // The `n` largest objects, in memory or on disk only, largest first (ties:
  // by id). O(objects * log n); for `lumen memory`, not a hot path.
  std::vector<StoreObjectInfo> LargestObjects(size_t n) const;
  const ShmSegment& segment() const { return *segment_; }
  // Bytes of the segment reserved up front so far (all of it once the
  // background reservation is done; 0 with Reserve::kPerObject).
  uint64_t ReservedBytes() const;
  // The directory spill files go to ("" until the first spill).
  const std::string& spill_path() const { return spill_path_; }
  // For tests: the table's invariants (ObjectTable::CheckInvariants).
  absl::Status TEST_CheckInvariants() const { return table_.CheckInvariants(); }
  // For tests: the objects' records (job, owner) and the owner index.
  const ObjectRecords& TEST_records() const { return records_; }

 private:
  // A request waiting for memory: a create, a restore or a pull-in.
  struct Parked {
    ClientId client;  // who pins the new object until seal
    ObjectId id;
    uint64_t size;
    bool secondary;
    std::chrono::steady_clock::time_point deadline;
    std::function<void(absl::StatusOr<uint64_t>)> done;  // the offset, or why not
  };
  // A spilled object being read back, and who waits for it.
  struct Restore {
    struct Waiter {
      ClientId client;
      ReplyFn reply;
      StoreKey key;  // the get's, to keep its answer for a repeat
    };
    std::vector<Waiter> waiters;
    int64_t started_us = 0;  // system clock, when the read began (its RESTORE event)
  };

  StoreServer(StoreOptions options, std::unique_ptr<ShmSegment> segment);

  // Keeps `answer` for a repeat of `key` (when keyed), then sends it.
  void Answer(const StoreKey& key, const ReplyFn& reply, const StoreReply& answer);
  // Allocates for `client` now, or parks the request until there is room.
  void Allocate(Parked request);
  // Gives memory to every parked request that fits, then makes room for the rest.
  void ServeParked();
  // Frees what can go now (secondaries, objects already on disk) and starts
  // spill batches until the bytes in flight cover the parked requests.
  void MakeRoom();
  void SpillBatch(std::vector<ObjectTable::Candidate> batch);
  void OnSpilled(const std::string& path, const std::vector<ObjectTable::Candidate>& batch,
                 const std::vector<SpillIndex::Range>& ranges, const absl::Status& status,
                 int64_t started_us);  // system clock, when the write began (its SPILL event)
  // Reads a spilled object back; `waiter` (optional) gets the Get answer.
  void StartRestore(const ObjectId& id, std::optional<Restore::Waiter> waiter);
  void OnRestored(const ObjectId& id, const absl::Status& status);
  void ArmTimer();
  void OnTimer();
  [[nodiscard]] absl::Status FullError(uint64_t size) const;
  void Forget(const ObjectId& id);  // its job's record and its disk copy
  // Runs `fn` on the io loop unless the server is gone by then.
  void PostToLoop(std::function<void()> fn);

  ThreadChecker io_thread_;
  StoreOptions options_;
  std::unique_ptr<ShmSegment> segment_;
  // Reserves segment_'s pages in the background (Reserve::kBackground), from
  // reserve_delay after the start (set then, on the io thread); declared
  // after segment_ so that it stops first.
  std::unique_ptr<SegmentReserver> reserver_;
  ObjectTable table_;
  // Which job created each object (Nil: a detached actor's, freed by whoever
  // owns it), and whose connection owns it (0: unknown; secondary copies),
  // indexed by owner for OwnerGone.
  ObjectRecords records_;
  // The answers to keyed requests, for their repeats (store_repeats.h).
  StoreRepeats repeats_;
  std::deque<Parked> parked_;
  boost::asio::steady_timer timer_;
  boost::asio::steady_timer reserve_timer_;  // starts reserver_ after reserve_delay
  SpillIndex index_;
  absl::flat_hash_map<ObjectId, Restore> restoring_;
  absl::flat_hash_set<ObjectId> spilling_;  // pinned by kSpillClient while written
  uint64_t spilling_bytes_ = 0;
  uint64_t next_file_ = 0;
  std::string spill_path_;  // our subdirectory of options_.spill_dir, once created
  SpillStats stats_;
  bool stopped_ = false;
  // Completions posted to the loop hold a weak_ptr to it: they do nothing once
  // the server is destroyed. Owned here only for that liveness check.
  std::shared_ptr<char> alive_ = std::make_shared<char>();
  std::unique_ptr<SpillWorker> worker_;  // last: joined first
};

}  // namespace lumen::objectstore
