// The per-object table of one driver or worker process: what it knows about
// each object it owns or borrows (reference counts, value, locations, waiters).
// Internal to core/worker. The ReferenceCounter and the MemoryStore both read
// and change entries; the table is the one lock they share.
//
//   ObjectTable table;
//   {
//     ObjectTable::Locked objects(table);  // holds the table's lock
//     auto it = objects->find(id);
//     if (it != objects->end()) ...
//   }
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/inlined_vector.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "lumen/actors/actor_call.h"
#include "core/worker/sharded_node_map.h"
#include "lumen/common/ids.h"

namespace lumen::runtime {

// Why a value is not there: the payload of a failed object.
using Failure = actors::TaskFailure;

// One call of Get or Wait that has to block (see MemoryStore::AwaitReady). It
// is registered on each of its objects that is not ready yet; each of them
// becoming ready counts `remaining` down once (under the table's lock), and the
// one that brings it to zero notifies the waiting thread. Nothing re-evaluates
// the whole list: a Get or Wait of N refs costs O(N) to register and
// unregister, plus O(1) per object that becomes ready.
struct ObjectWaiter {
  size_t remaining = 0;  // guarded by the table's lock
  absl::Notification done;
};

// The state of one object this process owns or borrows.
//
// Lifecycle: PENDING (ready == false) -> READY (inline value or stored in the
// node's store) or FAILED. Erased when no local reference, no pending task, no
// borrower and no in-transit copy needs it; an owned stored object is then
// deleted from the store.
//
// Borrowing: a reference serialised into a value pins the object at its owner
// (pending_escapes) until a process decoding it registers as a borrower
// (addBorrower, which takes the pin over); a borrower sends removeBorrower when
// its last local reference goes, and a borrower that dies is dropped when its
// connection closes. A value holding a reference that nobody ever decodes keeps
// the object until its owner exits.
//
// Every field is guarded by the table's lock, but `ready`, which may be read
// without it once set (readers then see the value written before it), and
// `owned`, set at insertion and never changed (a holder of a ref may read it).
struct ObjectEntry {
  bool owned = false;
  std::string owner_address;  // borrowed only; empty when owned (it is ours)
  std::atomic<bool> ready{false};
  enum class Kind { kInline, kStored, kFailed } kind = Kind::kInline;
  std::shared_ptr<const std::string> value;  // inline bytes, shared with readers
  uint64_t stored_size = 0;
  // Stored: the nodes holding a copy (node id, its daemon's address); the first
  // is where it was made. Owned objects learn of copies from their readers.
  std::vector<std::pair<NodeId, std::string>> locations;
  // kFailed: why. Behind a pointer: rare, and a Failure inline would cost
  // every entry ~100 bytes (issue 17: memory per queued task).
  std::unique_ptr<Failure> failure;
  int local_refs = 0;
  int pending_escapes = 0;           // owned: serialised copies not yet claimed
  int borrowers = 0;                 // owned: processes holding the ref
  bool registered_borrower = false;  // borrowed: we told the owner
  bool requested = false;            // borrowed: the owner was asked for the value
  bool is_actor = false;             // owned: the handle object of an actor we created
  // Owned: where it was created ("Put at f.cc:12", "task Plus"), for `lumen
  // memory`; interned by CallSites (lives as long as the process); nullptr: unknown.
  const std::string* call_site = nullptr;
  std::vector<std::function<void()>> on_ready;  // run on the io thread
  // Threads in Get/Wait counting this object down (one per occurrence in
  // their list); cleared when it becomes ready. Inline for one: a Get of N
  // pending refs then allocates nothing per object.
  absl::InlinedVector<ObjectWaiter*, 1> waiters;

  // Makes it a failed object (the caller holds the table's lock or owns the entry).
  void SetFailed(Failure f) {
    kind = Kind::kFailed;
    failure = std::make_unique<Failure>(std::move(f));
  }
};

// The table. Thread-safe: every access goes through a Locked view, which holds
// the table's mutex. Nodes: an entry's address stays put while it is in the
// table (Get/Wait keep pointers to entries their refs keep alive). Sharded in
// 64 node_hash_maps (ShardedNodeMap): a growth rehashes one of them only, so
// the insert that grows the table holds the lock ~1/64 as long (issue 17: a
// single map's doubling at a million queued tasks held it 300-800 ms and
// stalled the io thread).
class ObjectTable {
 public:
  using Map = ShardedNodeMap<ObjectId, ObjectEntry, 64>;

  // Holds the table's lock for its lifetime and gives access to the map. Never
  // held across a call that may take it again (a callback into the runtime).
  class ABSL_SCOPED_LOCKABLE Locked {
   public:
    explicit Locked(ObjectTable& table) ABSL_EXCLUSIVE_LOCK_FUNCTION(table.mu_)
        : table_(table) {
      table_.mu_.Lock();
    }
    ~Locked() ABSL_UNLOCK_FUNCTION() { table_.mu_.Unlock(); }
    Locked(const Locked&) = delete;
    Locked& operator=(const Locked&) = delete;

    Map* operator->() ABSL_NO_THREAD_SAFETY_ANALYSIS { return &table_.objects_; }
    Map& operator*() ABSL_NO_THREAD_SAFETY_ANALYSIS { return table_.objects_; }

   private:
    ObjectTable& table_;
  };

 private:
  absl::Mutex mu_;
  Map objects_ ABSL_GUARDED_BY(mu_);
};

}  // namespace lumen::runtime
