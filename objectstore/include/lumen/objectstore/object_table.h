// ObjectTable: the store server's bookkeeping of objects, pins and clients.
//
//   ObjectTable table(segment.get(), segment->size());
//   ASSIGN_OR_RETURN(uint64_t offset, table.Create(client, id, size));
//   // ... the client writes segment->writable_base() + offset ...
//   RETURN_IF_ERROR(table.Seal(client, id));
//   ASSIGN_OR_RETURN(ObjectTable::ObjectLocation loc, table.Get(reader, id));
//   table.Release(reader, id);
//   table.Delete(id);                 // the owner dropped its last reference
//   table.DisconnectClient(reader);   // the reader's socket closed
//
// It does no I/O of its own: the daemon's event loop translates requests on
// client sockets into these calls and replies with the results.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lumen/common/ids.h"
#include "lumen/objectstore/allocator.h"
#include "lumen/objectstore/shm_segment.h"

namespace lumen::objectstore {

// A connected store client (a worker or driver process), as the daemon numbers them.
using ClientId = uint64_t;

// Lifecycle of an object in the store:
//
//   Create ──> kCreated ──Seal──> kSealed ──Delete, no pins──────────> freed
//                 │                  │
//                 │                  └─Delete, pinned──> kDeletePending ──last pin
//                 │                                                       released──> freed
//                 ├──Abort, or the creator disconnects──────────────────────────────> freed
//                 └──Delete──> kDeletePending (still unsealed; freed when the
//                              creator seals or aborts and no pins remain)
//
// The creator holds a pin from Create until Seal or Abort; every successful
// Get adds a pin for the calling client, Release drops one, DisconnectClient
// drops all of a client's. Only sealed objects are readable: Get of a kCreated
// object is Unavailable, of a kDeletePending one NotFound.
enum class ObjectState : uint8_t { kCreated, kSealed, kDeletePending };

// The objects of one node's store. Not thread-safe (owned by the node
// daemon's event loop).
class ObjectTable {
 public:
  struct ObjectLocation {
    uint64_t offset;
    uint64_t size;  // The size given to Create (the allocation may be larger).
  };
  struct Stats {
    uint64_t capacity;
    uint64_t used;         // Allocated bytes, rounded up to the alignment.
    uint64_t num_objects;  // Including unsealed and delete-pending ones.
    uint64_t num_pinned;   // Objects held by at least one pin (creator's included).
  };

  // `segment` is borrowed and must outlive the table; it may be nullptr (unit
  // tests), in which case no memory is reserved. `capacity` must not exceed
  // segment->size().
  ObjectTable(ShmSegment* segment, uint64_t capacity);

  ObjectTable(const ObjectTable&) = delete;
  ObjectTable& operator=(const ObjectTable&) = delete;

  // An object that may be evicted now: sealed, not delete-pending, unpinned.
  struct Candidate {
    ObjectId id;
    uint64_t offset;
    uint64_t size;       // the object's bytes
    uint64_t allocated;  // its allocation's bytes (what evicting it frees)
    bool secondary;      // a copy pulled from another node
  };

  // Allocates `size` bytes for a new unsealed object pinned by `client`, and
  // reserves its pages in the segment. Returns the offset in the segment.
  // `secondary`: a copy of an object whose primary copy is on another node
  // (evicted before primaries are spilled). Errors: AlreadyExists if `id` is
  // present (in any state); ResourceExhausted when it does not fit or the
  // memory cannot be reserved.
  absl::StatusOr<uint64_t> Create(ClientId client, const ObjectId& id, uint64_t size,
                                  bool secondary = false);

  // Makes the object readable and drops the creator's pin. Errors: NotFound;
  // FailedPrecondition when already sealed or `client` is not the creator.
  [[nodiscard]] absl::Status Seal(ClientId client, const ObjectId& id);

  // The creator gives up an unsealed object; it is freed (unless pinned
  // otherwise, which cannot happen for an unsealed object). Errors: NotFound;
  // FailedPrecondition when sealed or `client` is not the creator.
  [[nodiscard]] absl::Status Abort(ClientId client, const ObjectId& id);

  // Pins a sealed object for `client` (pins are counted; each needs a
  // Release). Errors: NotFound if absent or delete-pending; Unavailable if
  // not sealed yet.
  absl::StatusOr<ObjectLocation> Get(ClientId client, const ObjectId& id);

  // Drops one of `client`'s pins on `id`; no-op if it holds none.
  void Release(ClientId client, const ObjectId& id);

  // The owner says no references remain: frees the object now if nothing
  // pins it, else when the last pin goes. No-op if absent.
  void Delete(const ObjectId& id);

  // Drops every pin `client` holds and aborts its unsealed objects.
  void DisconnectClient(ClientId client);

  // Every evictable object, lowest offset first (evicting in this order grows
  // one contiguous hole from the bottom of the segment). O(n log n).
  std::vector<Candidate> EvictionCandidates() const;
  // Frees a sealed, unpinned object that is not delete-pending (the store
  // keeps it elsewhere, or it is a secondary copy) and returns its allocated
  // bytes; returns 0 and does nothing for any other object.
  uint64_t Evict(const ObjectId& id);
  // Allocated bytes of the objects held by at least one pin: a running count,
  // kept on every pin, unpin, create and free. O(1).
  uint64_t PinnedBytes() const { return pinned_bytes_; }
  // The same, summed over every object. O(n); for tests and CheckInvariants.
  uint64_t RecountPinnedBytes() const;
  // For property tests: the allocator's invariants, one allocation per object,
  // pin counts that agree with the clients' pins, and the running counts of
  // pinned objects and bytes that agree with a recount; else Internal.
  [[nodiscard]] absl::Status CheckInvariants() const;
  const Allocator& allocator() const { return allocator_; }

  // One object as `lumen memory` shows it.
  struct ObjectInfo {
    ObjectId id;
    uint64_t size;
    ObjectState state;
    uint64_t pins;  // Get pins of all clients, plus one while unsealed (the creator's)
    bool secondary;
  };
  // Calls `fn` once for every object in any state, in no particular order.
  // `fn` must not change the table. O(n).
  void ForEachObject(const std::function<void(const ObjectInfo&)>& fn) const;

  // True if `id` is present in any state (delete-pending included).
  bool Contains(const ObjectId& id) const;
  // The object's state, or NotFound.
  absl::StatusOr<ObjectState> GetState(const ObjectId& id) const;
  Stats GetStats() const;

 private:
  // One per object, so its size is most of what an object costs the daemon
  // (issue 11: <= 256 B per small object in all): 32 bytes, widest first.
  struct Entry {
    uint64_t offset;
    uint64_t size;
    ClientId creator;
    uint32_t reader_pins;  // Sum of the Get pins of all clients.
    ObjectState state;
    bool creator_pinned;     // True until Seal or Abort: the object is unsealed.
    bool secondary = false;  // pulled from another node
  };
  static_assert(sizeof(Entry) == 32);
  struct ClientState {
    absl::flat_hash_map<ObjectId, uint64_t> pins;  // Get pins by object.
    absl::flat_hash_set<ObjectId> unsealed;        // Objects it created, not yet sealed.
  };

  // Frees the entry if it is delete-pending and unpinned.
  void MaybeFree(absl::flat_hash_map<ObjectId, Entry>::iterator it);
  void Free(absl::flat_hash_map<ObjectId, Entry>::iterator it);
  void DropUnsealed(ClientId client, const ObjectId& id);
  // The object allocated at `offset` became pinned (+1) or unpinned (-1):
  // updates num_pinned_ and pinned_bytes_. Call before freeing its allocation.
  void CountPinned(uint64_t offset, int delta);

  ShmSegment* const segment_;
  Allocator allocator_;
  absl::flat_hash_map<ObjectId, Entry> objects_;
  absl::flat_hash_map<ClientId, ClientState> clients_;
  uint64_t num_pinned_ = 0;    // objects with a creator or reader pin
  uint64_t pinned_bytes_ = 0;  // their allocated bytes
};

}  // namespace lumen::objectstore
