// MemoryStore: pending/ready/failed values and the Get/Wait countdown waiters,
// O(1) per object becoming ready. Thread-safe under the object table's lock.
#include "core/worker/memory_store.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <utility>

#include "absl/time/time.h"
#include "core/worker/worker_state.h"
#include "lumen/common/error_kind.h"
#include "lumen/common/proto_util.h"
#include "lumen/common/timeouts.h"

namespace lumen::runtime {

namespace {
// Steps taken by Get/Wait waiters: refs scanned when registering, countdowns,
// entries visited when unregistering (internal::AwaitStepsForTesting).
std::atomic<uint64_t> await_steps{0};
// Get/Wait calls that spun before blocking (internal::BlockSpinsForTesting).
std::atomic<uint64_t> block_spins{0};
}  // namespace

}  // namespace lumen::runtime

namespace lumen::internal {
uint64_t AwaitStepsForTesting() {
  return runtime::await_steps.load(std::memory_order_relaxed);
}
uint64_t BlockSpinsForTesting() { return runtime::block_spins.load(std::memory_order_relaxed); }
}  // namespace lumen::internal

namespace lumen::runtime {

MemoryStore::MemoryStore(ObjectTable& table, Callbacks callbacks)
    : table_(table), callbacks_(std::move(callbacks)) {}

void MemoryStore::WakeWaitersLocked(ObjectEntry& entry) {
  if (entry.waiters.empty()) return;
  await_steps.fetch_add(entry.waiters.size(), std::memory_order_relaxed);
  for (ObjectWaiter* waiter : entry.waiters) {
    // A Wait already satisfied stays registered until its thread unregisters.
    if (waiter->remaining > 0 && --waiter->remaining == 0) waiter->done.Notify();
  }
  entry.waiters.clear();
  entry.waiters.shrink_to_fit();
}

void MemoryStore::SetReady(const ObjectId& id, const std::function<void(ObjectEntry&)>& fill,
                           bool owned_result) {
  std::vector<std::function<void()>> callbacks;
  bool orphan_stored = false;
  std::vector<std::string> orphan_locations;
  {
    ObjectTable::Locked objects(table_);
    auto it = objects->find(id);
    if (it == objects->end()) {
      // Nobody holds a reference any more: drop the value, and the store copy
      // when it is a result this process owns (never a borrowed object).
      ObjectEntry scratch;
      fill(scratch);
      orphan_stored = owned_result && scratch.kind == ObjectEntry::Kind::kStored;
      for (const auto& [node, address] : scratch.locations) orphan_locations.push_back(address);
    } else if (!it->second.ready) {
      fill(it->second);
      it->second.ready.store(true, std::memory_order_release);
      callbacks.swap(it->second.on_ready);
      WakeWaitersLocked(it->second);
    }
  }
  if (orphan_stored) callbacks_.delete_orphan_copies(id, std::move(orphan_locations));
  if (!callbacks.empty()) callbacks_.run_on_ready(id, std::move(callbacks));
}

void MemoryStore::AddLocation(const ObjectId& id, const NodeId& node,
                              const std::string& address) {
  {
    ObjectTable::Locked objects(table_);
    auto it = objects->find(id);
    if (it != objects->end()) {
      if (!it->second.owned || it->second.kind != ObjectEntry::Kind::kStored) {
        return;  // not ours to track
      }
      for (const auto& [n, a] : it->second.locations)
        if (n == node) return;
      it->second.locations.emplace_back(node, address);
      return;
    }
  }
  callbacks_.delete_orphan_copies(id, {address});  // freed meanwhile: the new copy goes too
}

void MemoryStore::SetFailed(const ObjectId& id, const Failure& failure) {
  SetReady(id, [&](ObjectEntry& e) { e.SetFailed(failure); });
}

void MemoryStore::SetFromValue(const ObjectId& id, proto::Value::Reader value,
                               bool owned_result, const std::string* call_site) {
  switch (value.which()) {
    case proto::Value::INLINE: {
      auto data = value.getInline();
      auto bytes = std::make_shared<const std::string>(reinterpret_cast<const char*>(data.begin()),
                                                       data.size());
      SetReady(id, [&](ObjectEntry& e) {
        e.kind = ObjectEntry::Kind::kInline;
        e.value = bytes;
      });
      break;
    }
    case proto::Value::STORED: {
      uint64_t size = value.getStored().getSize();
      std::pair<NodeId, std::string> location{IdFrom<NodeId>(value.getStored().getNodeId()),
                                              value.getStored().getNodeAddress().cStr()};
      SetReady(
          id,
          [&](ObjectEntry& e) {
            e.kind = ObjectEntry::Kind::kStored;
            e.stored_size = size;
            e.locations = {location};
            if (call_site != nullptr) e.call_site = call_site;
          },
          owned_result);
      break;
    }
    case proto::Value::ERROR:
      SetFailed(id, FailureFromProto(value.getError()));
      break;
  }
}

void MemoryStore::CountAwaitSteps(uint64_t steps) {
  await_steps.fetch_add(steps, std::memory_order_relaxed);
}

absl::Status MemoryStore::BeginWait(const std::vector<ObjectId>& ids, size_t num_ready,
                                    PendingWait& wait, const std::vector<ObjectEntry*>& known) {
  wait.entries_.reserve(ids.size());
  wait.num_ready_ = num_ready;
  // One scan under the lock: find the entries, count the ready ones and, when
  // that is not enough, register the waiter on the others. From then on only
  // objects becoming ready touch it (WakeWaitersLocked), once each.
  ObjectTable::Locked objects(table_);
  size_t ready = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    const ObjectId& id = ids[i];
    ObjectEntry* found = known.empty() ? nullptr : known[i];
    if (found == nullptr) {
      auto it = objects->find(id);
      if (it == objects->end()) {
        return ErrorStatus(ErrorKind::kObjectLost, "object " + id.Hex() + " is unknown");
      }
      found = &it->second;
    }
    ObjectEntry& e = *found;
    if (!e.owned && !e.ready && !e.requested) {
      // Borrowed and not here yet: ask its owner.
      e.requested = true;
      callbacks_.request_from_owner(id, e.owner_address);
    }
    if (e.ready.load(std::memory_order_relaxed)) ++ready;
    wait.entries_.push_back(&e);
  }
  await_steps.fetch_add(wait.entries_.size(), std::memory_order_relaxed);
  if (ready >= num_ready) return absl::OkStatus();
  wait.registered_ = true;
  wait.waiter_.remaining = num_ready - ready;
  for (ObjectEntry* e : wait.entries_) {
    if (!e->ready.load(std::memory_order_relaxed)) e->waiters.push_back(&wait.waiter_);
  }
  return absl::OkStatus();
}

void MemoryStore::BlockUntilDone(PendingWait& wait,
                                 std::optional<std::chrono::steady_clock::time_point> deadline) {
  if (wait.Done()) return;
  // Entries stay put: node_hash_map nodes are stable and the caller's refs
  // keep them alive.
  if (callbacks_.spin_before_blocking && callbacks_.spin_before_blocking()) {
    block_spins.fetch_add(1, std::memory_order_relaxed);
    if (SpinFor(kSpinBeforeBlocking, [&] { return wait.Done(); })) return;
  }
  callbacks_.notify_blocked(true);
  if (deadline) {
    wait.waiter_.done.WaitForNotificationWithTimeout(
        absl::FromChrono(*deadline - std::chrono::steady_clock::now()));
  } else {
    wait.waiter_.done.WaitForNotification();
  }
  callbacks_.notify_blocked(false);
}

void MemoryStore::EndWait(PendingWait& wait) {
  if (!wait.registered_) return;
  // Unregister from whatever is still not ready (a timeout, or a Wait that
  // needed fewer than all). Ready objects dropped their waiters already, and
  // after this nobody touches the waiter: it is only counted down and notified
  // under the lock, so taking it here also waits for a Notify() still returning.
  ObjectTable::Locked objects(table_);
  if (wait.waiter_.remaining > 0 || wait.num_ready_ < wait.entries_.size()) {
    uint64_t visited = 0;
    for (ObjectEntry* e : wait.entries_) {
      if (e->ready.load(std::memory_order_relaxed)) continue;
      ++visited;
      e->waiters.erase(std::remove(e->waiters.begin(), e->waiters.end(), &wait.waiter_),
                       e->waiters.end());
      if (e->waiters.empty()) e->waiters.shrink_to_fit();
    }
    await_steps.fetch_add(visited, std::memory_order_relaxed);
  }
  wait.registered_ = false;
}

absl::StatusOr<std::vector<ObjectEntry*>> MemoryStore::AwaitReady(
    const std::vector<ObjectId>& ids, size_t num_ready,
    std::optional<std::chrono::milliseconds> timeout, const std::vector<ObjectEntry*>& known) {
  std::optional<std::chrono::steady_clock::time_point> deadline;
  if (timeout) deadline = DeadlineAfter(*timeout);
  PendingWait wait;
  if (absl::Status begun = BeginWait(ids, num_ready, wait, known); !begun.ok()) return begun;
  BlockUntilDone(wait, deadline);
  EndWait(wait);
  return std::move(wait.entries_);
}

}  // namespace lumen::runtime
