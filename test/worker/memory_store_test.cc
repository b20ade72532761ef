// Deterministic tests of the MemoryStore: values set by the test, waits
// driven step by step (BeginWait / EndWait) on one thread; no processes, no
// sockets, no sleeps.
#include "core/worker/memory_store.h"

#include <memory>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "lumen/errors.h"
#include "lumen/internal/runtime.h"

namespace lumen::runtime {
namespace {

struct StoreRig {
  ObjectTable table;
  std::vector<std::pair<ObjectId, size_t>> on_ready_handed;  // (object, callbacks)
  std::vector<std::pair<ObjectId, std::vector<std::string>>> orphans_deleted;
  std::vector<std::pair<ObjectId, std::string>> owner_requests;
  std::vector<bool> blocked_calls;
  MemoryStore store{
      table,
      {.run_on_ready =
           [this](const ObjectId& id, std::vector<std::function<void()>> callbacks) {
             on_ready_handed.emplace_back(id, callbacks.size());
           },
       .delete_orphan_copies =
           [this](const ObjectId& id, std::vector<std::string> copies) {
             orphans_deleted.emplace_back(id, std::move(copies));
           },
       .request_from_owner =
           [this](const ObjectId& id, const std::string& owner) {
             owner_requests.emplace_back(id, owner);
           },
       .notify_blocked = [this](bool blocked) { blocked_calls.push_back(blocked); }}};

  // A pending entry, owned or borrowed from `owner`.
  ObjectId AddPending(bool owned = true, const std::string& owner = "me") {
    ObjectId id = ObjectId::ForPut();
    ObjectTable::Locked objects(table);
    ObjectEntry& e = (*objects)[id];
    e.owned = owned;
    e.owner_address = owner;
    e.local_refs = 1;
    return id;
  }
  void MakeReady(const ObjectId& id, const std::string& bytes = "v") {
    auto value = std::make_shared<const std::string>(bytes);
    store.SetReady(id, [&](ObjectEntry& e) {
      e.kind = ObjectEntry::Kind::kInline;
      e.value = value;
    });
  }
  size_t WaitersOn(const ObjectId& id) {
    ObjectTable::Locked objects(table);
    return objects->at(id).waiters.size();
  }
};

TEST_CASE("Get of N refs wakes once, when the last becomes ready, in O(N)",
          "[worker][memory_store]") {
  // Invariant: a Get of N pending objects is woken exactly once, by the last
  // of them becoming ready (not before), and the whole wait costs O(N) steps:
  // N to register, one per object becoming ready, none to unregister.
  StoreRig rig;
  constexpr size_t kN = 1000;
  std::vector<ObjectId> ids;
  for (size_t i = 0; i < kN; ++i) ids.push_back(rig.AddPending());
  uint64_t before = internal::AwaitStepsForTesting();
  MemoryStore::PendingWait wait;
  rig.store.BeginWait(ids, kN, wait);
  REQUIRE_FALSE(wait.Done());
  for (size_t i = 0; i + 1 < kN; ++i) {
    rig.MakeReady(ids[i]);
    REQUIRE_FALSE(wait.Done());
  }
  rig.MakeReady(ids.back());
  REQUIRE(wait.Done());  // absl::Notification: a second wake-up would abort
  rig.store.BlockUntilDone(wait, std::nullopt);  // returns at once: already done
  rig.store.EndWait(wait);
  CHECK(internal::AwaitStepsForTesting() - before == 2 * kN);
  CHECK(rig.blocked_calls.empty());  // never blocked
  REQUIRE(wait.entries().size() == kN);
  for (size_t i = 0; i < kN; ++i) CHECK(wait.entries()[i]->ready.load());
}

TEST_CASE("a Wait for k of N is done at the k-th ready object and leaves no waiter behind",
          "[worker][memory_store]") {
  // Invariant: Wait(k of N) is woken by the k-th object becoming ready, and
  // once it ends no entry still points at its waiter (it lives on the stack).
  StoreRig rig;
  std::vector<ObjectId> ids;
  for (int i = 0; i < 5; ++i) ids.push_back(rig.AddPending());
  rig.MakeReady(ids[4]);  // one is ready before the Wait
  MemoryStore::PendingWait wait;
  rig.store.BeginWait(ids, 3, wait);
  REQUIRE_FALSE(wait.Done());
  CHECK(rig.WaitersOn(ids[0]) == 1);
  CHECK(rig.WaitersOn(ids[4]) == 0);
  rig.MakeReady(ids[1]);
  REQUIRE_FALSE(wait.Done());
  rig.MakeReady(ids[3]);
  REQUIRE(wait.Done());
  rig.store.EndWait(wait);
  CHECK(rig.WaitersOn(ids[0]) == 0);
  CHECK(rig.WaitersOn(ids[2]) == 0);
  // Later values find no waiter.
  rig.MakeReady(ids[0]);
  rig.MakeReady(ids[2]);
}

TEST_CASE("a Get that times out unregisters its waiter", "[worker][memory_store]") {
  // Invariant: a timed-out Get returns the not-ready entries as they are, says
  // it blocked and unblocked once each, and leaves no waiter registered.
  StoreRig rig;
  ObjectId id = rig.AddPending();
  auto entries = rig.store.AwaitReady({id}, 1, std::chrono::milliseconds(0));
  REQUIRE(entries.size() == 1);
  CHECK_FALSE(entries[0]->ready.load());
  CHECK(rig.blocked_calls == std::vector<bool>{true, false});
  CHECK(rig.WaitersOn(id) == 0);
}

TEST_CASE("a Get of a borrowed object asks its owner once", "[worker][memory_store]") {
  // Invariant: the first Get of a borrowed object that is not here asks its
  // owner; later Gets of it do not ask again.
  StoreRig rig;
  ObjectId id = rig.AddPending(/*owned=*/false, "owner:9");
  rig.store.AwaitReady({id}, 1, std::chrono::milliseconds(0));
  rig.store.AwaitReady({id}, 1, std::chrono::milliseconds(0));
  REQUIRE(rig.owner_requests.size() == 1);
  CHECK(rig.owner_requests[0] == std::make_pair(id, std::string("owner:9")));
  CHECK_THROWS_AS(rig.store.AwaitReady({ObjectId::ForPut()}, 1, std::nullopt), ObjectLostError);
}

TEST_CASE("a value is set once, callbacks are handed over once, orphans go",
          "[worker][memory_store]") {
  // Invariant: the first value (or failure) of an object wins and hands its
  // on_ready callbacks over once; a stored result arriving for an object
  // nobody references has its copies deleted, a borrowed one never.
  StoreRig rig;
  ObjectId id = rig.AddPending();
  {
    ObjectTable::Locked objects(rig.table);
    objects->at(id).on_ready.push_back([] {});
    objects->at(id).on_ready.push_back([] {});
  }
  rig.store.SetFailed(id, Failure{proto::FailureKind::OBJECT_LOST, "", "gone", ""});
  rig.MakeReady(id, "late");
  REQUIRE(rig.on_ready_handed.size() == 1);
  CHECK(rig.on_ready_handed[0].second == 2);
  {
    ObjectTable::Locked objects(rig.table);
    CHECK(objects->at(id).kind == ObjectEntry::Kind::kFailed);
  }
  auto stored = [](ObjectEntry& e) {
    e.kind = ObjectEntry::Kind::kStored;
    e.locations = {{NodeId::Random(), "nodeA"}};
  };
  ObjectId orphan = ObjectId::ForPut();
  rig.store.SetReady(orphan, stored, /*owned_result=*/false);
  CHECK(rig.orphans_deleted.empty());
  rig.store.SetReady(orphan, stored, /*owned_result=*/true);
  REQUIRE(rig.orphans_deleted.size() == 1);
  CHECK(rig.orphans_deleted[0].second == std::vector<std::string>{"nodeA"});
}

}  // namespace
}  // namespace lumen::runtime
