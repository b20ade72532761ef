// The in-process memory store of one driver or worker process (Ray's
// CoreWorkerMemoryStore, smaller): each object's value as this process knows
// it (pending, ready inline, ready in a node's store with its copies'
// locations, or failed), and the threads in Get/Wait waiting for values.
//
//   MemoryStore store(table, callbacks);
//   store.SetReady(id, [&](ObjectEntry& e) { e.kind = ObjectEntry::Kind::kInline; ... });
//   auto entries = store.AwaitReady(ids, ids.size(), std::chrono::seconds(1));
//
// A Get or Wait of N objects costs O(N) plus O(1) per object becoming ready
// (see ObjectWaiter); nothing re-scans the list. A Wait whose objects are
// ready enough already costs N atomic loads and no lock (ReadyWithoutLock).
//
// Thread-safe: every method takes the object table's lock; AwaitReady blocks
// its calling thread (never call it on the io thread). Internal to core/worker.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/worker/object_table.h"
#include "lumen/common/ids.h"
#include "lumen/proto/lumen.capnp.h"

namespace lumen::runtime {

class MemoryStore {
 public:
  struct Callbacks {
    // The on_ready callbacks of `id`, which just became ready or failed: they
    // run on the io thread, and then the object may be freed. Runs without the lock.
    std::function<void(const ObjectId&, std::vector<std::function<void()>>)> run_on_ready;
    // A value arrived for an object nobody references any more, and it is a
    // stored result this process owns: its copies (daemon addresses) go.
    // Runs without the lock.
    std::function<void(const ObjectId&, std::vector<std::string> copies)> delete_orphan_copies;
    // A Get/Wait needs a borrowed object that is not here: ask `owner` for it.
    // Runs with the table's lock held (post, do not block or re-enter).
    std::function<void(const ObjectId&, const std::string& owner)> request_from_owner;
    // The calling thread is about to block in Get/Wait (true), or is done (false).
    std::function<void(bool blocked)> notify_blocked;
    // Whether the calling thread spins (kSpinBeforeBlocking) before it blocks:
    // where a block costs more than a futex (a task's thread in a worker, whose
    // notify_blocked tells the node and hands back queued tasks) and most waits
    // end within the spin. Elsewhere (a driver) it blocks at once: on a busy
    // machine a spin takes the CPU from the threads that bring the value.
    // Null: never spins.
    std::function<bool()> spin_before_blocking;
  };

  // How long a Get/Wait spins before it blocks, where it does (Callbacks::spin_before_blocking).
  static constexpr std::chrono::microseconds kSpinBeforeBlocking{50};

  // One Get or Wait in progress (BeginWait, BlockUntilDone, EndWait). Lives on
  // the waiting thread's stack; only counted down under the table's lock.
  class PendingWait {
   public:
    PendingWait() = default;
    PendingWait(const PendingWait&) = delete;
    PendingWait& operator=(const PendingWait&) = delete;
    // Enough of its objects are ready (or it never had to wait).
    bool Done() const { return !registered_ || waiter_.done.HasBeenNotified(); }
    // The entries of its objects, in the order asked; they stay valid while
    // the caller holds references to the objects.
    const std::vector<ObjectEntry*>& entries() const { return entries_; }

   private:
    friend class MemoryStore;
    ObjectWaiter waiter_;
    std::vector<ObjectEntry*> entries_;
    size_t num_ready_ = 0;
    bool registered_ = false;
  };

  // `table` outlives the store.
  MemoryStore(ObjectTable& table, Callbacks callbacks);

  // Makes `id` ready with what `fill` writes into its entry (no effect once
  // it is ready). Wakes its waiters and hands its on_ready callbacks to
  // run_on_ready. `owned_result`: a task result this process owns, whose
  // stored copies go if nobody references it any more.
  void SetReady(const ObjectId& id, const std::function<void(ObjectEntry&)>& fill,
                bool owned_result = false);
  // The object fails with `failure` (no effect once it is ready).
  void SetFailed(const ObjectId& id, const Failure& failure);
  // The object gets `value` (inline bytes, a stored copy's location, or an
  // error) from a task reply or its owner's answer. `call_site` (interned by
  // CallSites, or nullptr) is recorded on a stored value.
  void SetFromValue(const ObjectId& id, proto::Value::Reader value, bool owned_result,
                    const std::string* call_site = nullptr);
  // Owner side: node `node` (its daemon at `address`) holds a new copy of our
  // stored object `id` (a reader pulled it there). Ignored for an object we
  // do not own or that is not stored; a copy of an object freed meanwhile
  // goes (delete_orphan_copies).
  void AddLocation(const ObjectId& id, const NodeId& node, const std::string& address);

  // Waits until `num_ready` of `ids` are ready or the timeout passes (none:
  // forever); returns their entries (see PendingWait::entries), or a
  // kObjectLost Status (lumen/common/error_kind.h) for an object this
  // process does not know. `known`: empty, or per id its entry when the
  // caller already has it (RefHandle::entry; nullptr: look it up), which
  // saves the lookup.
  [[nodiscard]] absl::StatusOr<std::vector<ObjectEntry*>> AwaitReady(
      const std::vector<ObjectId>& ids, size_t num_ready,
      std::optional<std::chrono::milliseconds> timeout,
      const std::vector<ObjectEntry*>& known = {});

  // Without the table's lock: marks in `ready` (resized to `n`) which of the
  // n entries `entry(i)` are ready now, and returns how many; nullopt when
  // that cannot be told without the lock: an entry not known (nullptr) or a
  // borrowed object not here (BeginWait asks its owner). A Wait satisfied by
  // this takes no lock and registers nothing. The caller holds references to
  // the objects (their entries stay put). Counts one await step per entry.
  //
  // The scan stops once `enough` are found (a Wait reports only the first
  // num_returns ready refs, in input order): the entries after that stay
  // false in `ready` unchecked, so a Wait(refs, 1) loop over a list that
  // completes in order scans one entry per call.
  template <class EntryAt>
  static std::optional<size_t> ReadyWithoutLock(size_t n, EntryAt entry, std::vector<bool>& ready,
                                                size_t enough = SIZE_MAX) {
    ready.assign(n, false);
    size_t count = 0, scanned = 0;
    for (size_t i = 0; i < n && count < enough; ++i) {
      const ObjectEntry* e = entry(i);
      if (e == nullptr) return std::nullopt;
      // `ready` is set with release after the value; `owned` never changes
      // after the entry's insertion, which happened before the caller got its ref.
      if (e->ready.load(std::memory_order_acquire)) {
        ready[i] = true;
        ++count;
      } else if (!e->owned) {
        return std::nullopt;
      }
      ++scanned;
    }
    CountAwaitSteps(scanned);
    return count;
  }

  // AwaitReady in its three steps (tests drive them one by one). BeginWait
  // finds the entries, asks owners for borrowed values not here, and registers
  // `wait` on the objects not ready when fewer than `num_ready` are; a
  // kObjectLost Status for an unknown object (then `wait` is registered
  // nowhere). `known` as for AwaitReady.
  [[nodiscard]] absl::Status BeginWait(const std::vector<ObjectId>& ids, size_t num_ready,
                                       PendingWait& wait,
                                       const std::vector<ObjectEntry*>& known = {});
  // Spins briefly, then blocks until `wait` is done or the deadline passes.
  void BlockUntilDone(PendingWait& wait,
                      std::optional<std::chrono::steady_clock::time_point> deadline);
  // Unregisters `wait` from the objects still not ready; after it nothing
  // touches `wait`.
  void EndWait(PendingWait& wait);

 private:
  static void CountAwaitSteps(uint64_t steps);
  // Counts down the waits registered on an entry that just became ready.
  static void WakeWaitersLocked(ObjectEntry& entry);

  ObjectTable& table_;
  const Callbacks callbacks_;
};

}  // namespace lumen::runtime
