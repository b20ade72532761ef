// CoreWorker: the in-process memory store (pending/ready/failed values) and
// the Get/Wait countdown waiters, O(1) per object becoming ready.
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
#include "lumen/common/head_client.h"
#include "lumen/common/logging.h"
#include "lumen/common/process.h"
#include "lumen/common/proto_util.h"
#include "lumen/errors.h"
#include "lumen/objectstore/fd_passing.h"
#include "lumen/objectstore/object_table.h"

namespace lumen::runtime {

namespace {
// Steps taken by Get/Wait waiters: refs scanned when registering, countdowns,
// entries visited when unregistering (internal::AwaitStepsForTesting).
std::atomic<uint64_t> await_steps{0};
}  // namespace

}  // namespace lumen::runtime

namespace lumen::internal {
uint64_t AwaitStepsForTesting() {
  return runtime::await_steps.load(std::memory_order_relaxed);
}
}  // namespace lumen::internal

namespace lumen::runtime {

void CoreWorker::WakeWaitersLocked(ObjectEntry& entry) {
  if (entry.waiters.empty()) return;
  await_steps.fetch_add(entry.waiters.size(), std::memory_order_relaxed);
  for (Waiter* waiter : entry.waiters) {
    // A Wait already satisfied stays registered until its thread unregisters.
    if (waiter->remaining > 0 && --waiter->remaining == 0) waiter->done.Notify();
  }
  std::vector<Waiter*>().swap(entry.waiters);
}

void CoreWorker::SetObjectReady(const ObjectId& id, std::function<void(ObjectEntry&)> fill,
                                bool owned_result) {
  std::vector<std::function<void()>> callbacks;
  bool orphan_stored = false;
  std::vector<std::string> orphan_locations;
  {
    absl::MutexLock lock(&mu_);
    auto it = objects_.find(id);
    if (it == objects_.end()) {
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
  if (orphan_stored) DeleteCopies(id, std::move(orphan_locations));
  if (!callbacks.empty()) {
    PostToIo([this, id, callbacks = std::move(callbacks)] {
      for (auto& cb : callbacks) cb();
      absl::MutexLock lock(&mu_);
      auto it = objects_.find(id);
      if (it != objects_.end()) MaybeFreeLocked(it);
    });
  }
}

void CoreWorker::SetObjectFailed(const ObjectId& id, const Failure& failure) {
  SetObjectReady(id, [&](ObjectEntry& e) { e.SetFailed(failure); });
}

void CoreWorker::SetObjectFromValue(const ObjectId& id, proto::Value::Reader value,
                                    bool owned_result) {
  switch (value.which()) {
    case proto::Value::INLINE: {
      auto data = value.getInline();
      auto bytes = std::make_shared<const std::string>(reinterpret_cast<const char*>(data.begin()),
                                                       data.size());
      SetObjectReady(id, [&](ObjectEntry& e) {
        e.kind = ObjectEntry::Kind::kInline;
        e.value = bytes;
      });
      break;
    }
    case proto::Value::STORED: {
      uint64_t size = value.getStored().getSize();
      std::pair<NodeId, std::string> location{IdFrom<NodeId>(value.getStored().getNodeId()),
                                              value.getStored().getNodeAddress().cStr()};
      SetObjectReady(
          id,
          [&](ObjectEntry& e) {
            e.kind = ObjectEntry::Kind::kStored;
            e.stored_size = size;
            e.locations = {location};
          },
          owned_result);
      break;
    }
    case proto::Value::ERROR:
      SetObjectFailed(id, FailureFromProto(value.getError()));
      break;
  }
}

std::vector<CoreWorker::ObjectEntry*> CoreWorker::AwaitReady(
    const std::vector<const internal::RefHandle*>& refs, size_t num_ready,
    std::optional<std::chrono::milliseconds> timeout) {
  const auto deadline =
      std::chrono::steady_clock::now() + timeout.value_or(std::chrono::milliseconds(0));
  std::vector<ObjectEntry*> entries;
  entries.reserve(refs.size());
  // One scan under mu_: find the entries, count the ready ones and, when that is
  // not enough, register the waiter on the others. From then on only objects
  // becoming ready touch it (WakeWaitersLocked), once each.
  Waiter waiter;
  {
    absl::MutexLock lock(&mu_);
    size_t ready = 0;
    for (const auto* ref : refs) {
      auto it = objects_.find(ref->id());
      if (it == objects_.end()) throw ObjectLostError("object " + ref->id().Hex() + " is unknown");
      ObjectEntry& e = it->second;
      if (!e.owned && !e.ready && !e.requested) {
        // Borrowed and not here yet: ask its owner.
        e.requested = true;
        ObjectId id = ref->id();
        std::string owner = e.owner_address;
        PostToIo([this, id, owner] { RequestObjectFromOwner(id, owner); });
      }
      if (e.ready.load(std::memory_order_relaxed)) ++ready;
      entries.push_back(&e);
    }
    await_steps.fetch_add(entries.size(), std::memory_order_relaxed);
    if (ready >= num_ready) return entries;
    waiter.remaining = num_ready - ready;
    for (ObjectEntry* e : entries) {
      if (!e->ready.load(std::memory_order_relaxed)) e->waiters.push_back(&waiter);
    }
  }
  // Entries stay put: node_hash_map nodes are stable and `refs` keep them alive.
  bool done = SpinFor(std::chrono::microseconds(50), [&] { return waiter.done.HasBeenNotified(); });
  if (!done) {
    NotifyBlocked(true);
    if (timeout) {
      waiter.done.WaitForNotificationWithTimeout(
          absl::FromChrono(deadline - std::chrono::steady_clock::now()));
    } else {
      waiter.done.WaitForNotification();
    }
    NotifyBlocked(false);
  }
  {
    // Unregister from whatever is still not ready (a timeout, or a Wait that
    // needed fewer than all). Ready objects dropped their waiters already, and
    // after this nobody touches `waiter`: it is only counted down and notified
    // under mu_, so taking mu_ here also waits for a Notify() still returning.
    absl::MutexLock lock(&mu_);
    if (waiter.remaining > 0 || num_ready < entries.size()) {
      uint64_t visited = 0;
      for (ObjectEntry* e : entries) {
        if (e->ready.load(std::memory_order_relaxed)) continue;
        ++visited;
        std::erase(e->waiters, &waiter);
        if (e->waiters.empty()) std::vector<Waiter*>().swap(e->waiters);
      }
      await_steps.fetch_add(visited, std::memory_order_relaxed);
    }
  }
  return entries;
}

std::vector<internal::ObjectBytes> CoreWorker::Get(
    const std::vector<const internal::RefHandle*>& refs,
    std::optional<std::chrono::milliseconds> timeout) {
  auto entries = AwaitReady(refs, refs.size(), timeout);
  for (size_t i = 0; i < entries.size(); ++i) {
    if (!entries[i]->ready) {
      throw GetTimeoutError(absl::StrCat("Get timed out after ", timeout->count(),
                                         " ms waiting for object ", refs[i]->id().Hex()));
    }
  }
  std::vector<internal::ObjectBytes> out;
  out.reserve(refs.size());
  for (const auto* ref : refs) out.push_back(ReadyBytes(ref->id()));
  return out;
}

std::vector<bool> CoreWorker::Wait(const std::vector<const internal::RefHandle*>& refs,
                                   size_t num_returns,
                                   std::optional<std::chrono::milliseconds> timeout) {
  auto entries = AwaitReady(refs, num_returns, timeout);
  std::vector<bool> ready(entries.size());
  for (size_t i = 0; i < entries.size(); ++i) ready[i] = entries[i]->ready.load();
  return ready;
}

}  // namespace lumen::runtime
