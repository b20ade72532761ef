// Deterministic tests of the MemoryStore: values set by the test, waits
// driven step by step (BeginWait / EndWait) on one thread; no processes, no
// sockets, no sleeps.
#include "core/worker/memory_store.h"

#include <memory>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "lumen/common/error_kind.h"
#include "lumen/internal/runtime.h"

namespace lumen::runtime {
namespace {

struct StoreRig {
  ObjectTable table;
  std::vector<std::pair<ObjectId, size_t>> on_ready_handed;  // (object, callbacks)
  std::vector<std::pair<ObjectId, std::vector<std::string>>> orphans_deleted;
  std::vector<std::pair<ObjectId, std::string>> owner_requests;
  std::vector<bool> blocked_calls;
  bool spin_first = false;  // what spin_before_blocking answers
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
       .notify_blocked = [this](bool blocked) { blocked_calls.push_back(blocked); },
       .spin_before_blocking = [this] { return spin_first; }}};

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
  ObjectEntry* EntryOf(const ObjectId& id) {
    ObjectTable::Locked objects(table);
    return objects->find_value(id);
  }
  size_t WaitersOn(const ObjectId& id) {
    ObjectTable::Locked objects(table);
    return objects->find_value(id)->waiters.size();
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
  REQUIRE(rig.store.BeginWait(ids, kN, wait).ok());
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
  REQUIRE(rig.store.BeginWait(ids, 3, wait).ok());
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
  REQUIRE(entries.ok());
  REQUIRE(entries->size() == 1);
  CHECK_FALSE((*entries)[0]->ready.load());
  CHECK(rig.blocked_calls == std::vector<bool>{true, false});
  CHECK(rig.WaitersOn(id) == 0);
}

TEST_CASE("a Get spins before it blocks only where spin_before_blocking says so",
          "[worker][memory_store]") {
  // Invariant: a Get that must block spins first exactly when the hook says
  // so (a task's thread in a worker), and blocks at once otherwise (a driver);
  // either way it says it blocked, and a Get that need not block neither
  // spins nor blocks.
  StoreRig rig;
  ObjectId id = rig.AddPending();
  uint64_t spins = internal::BlockSpinsForTesting();
  REQUIRE(rig.store.AwaitReady({id}, 1, std::chrono::milliseconds(0)).ok());
  CHECK(internal::BlockSpinsForTesting() == spins);
  rig.spin_first = true;
  REQUIRE(rig.store.AwaitReady({id}, 1, std::chrono::milliseconds(0)).ok());
  CHECK(internal::BlockSpinsForTesting() == spins + 1);
  CHECK(rig.blocked_calls == std::vector<bool>{true, false, true, false});
  rig.MakeReady(id);
  REQUIRE(rig.store.AwaitReady({id}, 1, std::chrono::milliseconds(0)).ok());
  CHECK(internal::BlockSpinsForTesting() == spins + 1);
  CHECK(rig.blocked_calls.size() == 4);
}

TEST_CASE("a Get of a borrowed object asks its owner once", "[worker][memory_store]") {
  // Invariant: the first Get of a borrowed object that is not here asks its
  // owner; later Gets of it do not ask again.
  StoreRig rig;
  ObjectId id = rig.AddPending(/*owned=*/false, "owner:9");
  REQUIRE(rig.store.AwaitReady({id}, 1, std::chrono::milliseconds(0)).ok());
  REQUIRE(rig.store.AwaitReady({id}, 1, std::chrono::milliseconds(0)).ok());
  REQUIRE(rig.owner_requests.size() == 1);
  CHECK(rig.owner_requests[0] == std::make_pair(id, std::string("owner:9")));
  auto unknown = rig.store.AwaitReady({ObjectId::ForPut()}, 1, std::nullopt);
  REQUIRE_FALSE(unknown.ok());
  CHECK(ErrorKindOf(unknown.status()) == ErrorKind::kObjectLost);
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
    objects->find_value(id)->on_ready.push_back([] {});
    objects->find_value(id)->on_ready.push_back([] {});
  }
  rig.store.SetFailed(id, Failure{proto::FailureKind::OBJECT_LOST, "", "gone", ""});
  rig.MakeReady(id, "late");
  REQUIRE(rig.on_ready_handed.size() == 1);
  CHECK(rig.on_ready_handed[0].second == 2);
  {
    ObjectTable::Locked objects(rig.table);
    CHECK(objects->find_value(id)->kind == ObjectEntry::Kind::kFailed);
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

TEST_CASE("a new copy is recorded once for our stored objects, ignored for others, and goes when freed",
          "[worker][memory_store]") {
  // Invariant: AddLocation records each node's copy of an owned stored object
  // once; it never touches a borrowed or inline entry; a copy reported for an
  // object already freed is handed to delete_orphan_copies (else it would
  // stay in that node's store forever).
  StoreRig rig;
  const NodeId here = NodeId::Random(), there = NodeId::Random();
  ObjectId stored = rig.AddPending();
  rig.store.SetReady(stored, [&](ObjectEntry& e) {
    e.kind = ObjectEntry::Kind::kStored;
    e.locations = {{here, "here"}};
  });
  rig.store.AddLocation(stored, there, "there");
  rig.store.AddLocation(stored, there, "there");
  REQUIRE(rig.EntryOf(stored)->locations ==
          std::vector<std::pair<NodeId, std::string>>{{here, "here"}, {there, "there"}});

  ObjectId borrowed = rig.AddPending(/*owned=*/false, "them");
  rig.store.SetReady(borrowed, [&](ObjectEntry& e) { e.kind = ObjectEntry::Kind::kStored; });
  ObjectId inline_value = rig.AddPending();
  rig.MakeReady(inline_value);
  rig.store.AddLocation(borrowed, there, "there");
  rig.store.AddLocation(inline_value, there, "there");
  CHECK(rig.EntryOf(borrowed)->locations.empty());
  CHECK(rig.EntryOf(inline_value)->locations.empty());
  CHECK(rig.orphans_deleted.empty());

  ObjectId freed = ObjectId::ForPut();
  rig.store.AddLocation(freed, there, "there");
  REQUIRE(rig.orphans_deleted.size() == 1);
  CHECK(rig.orphans_deleted[0].first == freed);
  CHECK(rig.orphans_deleted[0].second == std::vector<std::string>{"there"});
}

TEST_CASE("ReadyWithoutLock tells ready, failed and duplicate entries apart in input order",
          "[worker][memory_store]") {
  // Invariant: without the lock, the mask marks exactly the ready entries (a
  // failed object counts as ready, as in Ray) at their input positions, a
  // duplicate is counted once per occurrence, and each entry is one step; with
  // `enough`, only the first that many ready ones are marked and the scan
  // stops after the last of them.
  StoreRig rig;
  ObjectId a = rig.AddPending(), b = rig.AddPending(), c = rig.AddPending();
  rig.MakeReady(a);
  rig.store.SetFailed(c, Failure{proto::FailureKind::TASK_ERROR, "E", "boom", ""});
  std::vector<ObjectEntry*> entries{rig.EntryOf(c), rig.EntryOf(b), rig.EntryOf(a),
                                    rig.EntryOf(a)};
  std::vector<bool> ready;
  uint64_t before = internal::AwaitStepsForTesting();
  auto count = MemoryStore::ReadyWithoutLock(entries.size(),
                                             [&](size_t i) { return entries[i]; }, ready);
  CHECK(internal::AwaitStepsForTesting() - before == entries.size());
  REQUIRE(count.has_value());
  CHECK(*count == 3);
  CHECK(ready == std::vector<bool>{true, false, true, true});
  CHECK(rig.WaitersOn(b) == 0);  // nothing registered
  // Enough found (a Wait's num_returns): the scan stops there, the rest
  // unchecked and false, one step per entry looked at.
  before = internal::AwaitStepsForTesting();
  count = MemoryStore::ReadyWithoutLock(entries.size(), [&](size_t i) { return entries[i]; },
                                        ready, /*enough=*/2);
  CHECK(internal::AwaitStepsForTesting() - before == 3);
  REQUIRE(count.has_value());
  CHECK(*count == 2);
  CHECK(ready == std::vector<bool>{true, false, true, false});
  // Nothing ready: a count of zero, not "unknown".
  std::vector<ObjectEntry*> pending{rig.EntryOf(b)};
  count = MemoryStore::ReadyWithoutLock(1, [&](size_t i) { return pending[i]; }, ready);
  REQUIRE(count.has_value());
  CHECK(*count == 0);
  CHECK(ready == std::vector<bool>{false});
}

TEST_CASE("ReadyWithoutLock leaves unknown entries and borrowed objects not here to the lock",
          "[worker][memory_store]") {
  // Invariant: an entry not known (nullptr) or a borrowed object that is not
  // here gives no answer (the locked path must look it up or ask the owner);
  // a borrowed object already here is answered.
  StoreRig rig;
  ObjectId mine = rig.AddPending();
  ObjectId theirs = rig.AddPending(/*owned=*/false, "owner:1");
  rig.MakeReady(mine);
  std::vector<bool> ready;
  std::vector<ObjectEntry*> with_unknown{rig.EntryOf(mine), nullptr};
  CHECK_FALSE(MemoryStore::ReadyWithoutLock(2, [&](size_t i) { return with_unknown[i]; }, ready)
                  .has_value());
  std::vector<ObjectEntry*> borrowed{rig.EntryOf(mine), rig.EntryOf(theirs)};
  CHECK_FALSE(
      MemoryStore::ReadyWithoutLock(2, [&](size_t i) { return borrowed[i]; }, ready).has_value());
  CHECK(rig.owner_requests.empty());  // asking is the locked path's job
  rig.MakeReady(theirs);
  auto count = MemoryStore::ReadyWithoutLock(2, [&](size_t i) { return borrowed[i]; }, ready);
  REQUIRE(count.has_value());
  CHECK(*count == 2);
}

TEST_CASE("a Wait given its entries registers, times out and asks owners as one that looks them up",
          "[worker][memory_store]") {
  // Invariant: AwaitReady with the caller's entries (RefHandle::entry) behaves
  // as with lookups: it counts the ready ones, registers on the rest, asks the
  // owner of a borrowed object once, unregisters at its timeout; a nullptr
  // entry is looked up (and an unknown one still throws).
  StoreRig rig;
  ObjectId ready_one = rig.AddPending(), pending = rig.AddPending();
  ObjectId borrowed = rig.AddPending(/*owned=*/false, "owner:2");
  rig.MakeReady(ready_one);
  std::vector<ObjectId> ids{ready_one, pending, borrowed, pending};
  std::vector<ObjectEntry*> known{rig.EntryOf(ready_one), nullptr, rig.EntryOf(borrowed),
                                  rig.EntryOf(pending)};
  MemoryStore::PendingWait wait;
  REQUIRE(rig.store.BeginWait(ids, 2, wait, known).ok());
  REQUIRE_FALSE(wait.Done());
  CHECK(rig.WaitersOn(pending) == 2);  // once per occurrence
  CHECK(rig.WaitersOn(borrowed) == 1);
  REQUIRE(rig.owner_requests.size() == 1);
  CHECK(rig.owner_requests[0].first == borrowed);
  REQUIRE(wait.entries().size() == 4);
  CHECK(wait.entries()[1] == rig.EntryOf(pending));
  rig.MakeReady(pending);  // its first registration brings the count to zero
  REQUIRE(wait.Done());
  rig.store.EndWait(wait);
  CHECK(rig.WaitersOn(borrowed) == 0);
  // Timed out with the entries given: nothing stays registered.
  ObjectId late = rig.AddPending();
  auto entries = rig.store.AwaitReady({late}, 1, std::chrono::milliseconds(0), {rig.EntryOf(late)});
  REQUIRE(entries.ok());
  CHECK_FALSE((*entries)[0]->ready.load());
  CHECK(rig.WaitersOn(late) == 0);
  auto unknown = rig.store.AwaitReady({ObjectId::ForPut()}, 1, std::nullopt, {nullptr});
  REQUIRE_FALSE(unknown.ok());
  CHECK(ErrorKindOf(unknown.status()) == ErrorKind::kObjectLost);
}

}  // namespace
}  // namespace lumen::runtime
