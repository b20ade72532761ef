// Deterministic tests of the ReferenceCounter: no processes, no sockets; the
// messages between owner and borrowers are delivered by the test, in every order.
#include "core/worker/reference_counter.h"

#include <algorithm>
#include <array>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "core/worker/borrower_registry.h"

namespace lumen::runtime {
namespace {

const std::string kOwner = "owner:1";
const std::string kOtherOwner = "other:2";

// An owner's counter with its outputs recorded.
struct OwnerRig {
  ObjectTable table;
  std::vector<ReferenceCounter::Freed> freed;
  std::vector<std::pair<std::string, bool>> borrower_changes;  // (owner, add)
  std::vector<std::string> escapes;                            // owners told
  ReferenceCounter refs{table,
                        {.on_freed = [this](ReferenceCounter::Freed f) { freed.push_back(f); },
                         .send_borrower_change =
                             [this](const ObjectId&, const std::string& owner, bool add) {
                               borrower_changes.emplace_back(owner, add);
                             },
                         .send_escape = [this](const ObjectId&,
                                               const std::string& owner) { escapes.push_back(owner); }}};

  OwnerRig() { refs.SetSelfAddress(kOwner); }

  bool Known(const ObjectId& id) {
    ObjectTable::Locked objects(table);
    return objects->contains(id);
  }
  // Makes an owned object stored on two nodes (as a task result would be).
  void MakeStored(const ObjectId& id) {
    ObjectTable::Locked objects(table);
    ObjectEntry& e = *objects->find_value(id);
    e.kind = ObjectEntry::Kind::kStored;
    e.stored_size = 100;
    e.locations = {{NodeId::Random(), "nodeA"}, {NodeId::Random(), "nodeB"}};
    e.ready.store(true);
  }
};

TEST_CASE("a borrower's release racing the owner's free frees the object once, after the last "
          "holder",
          "[worker][refs]") {
  // Invariant: an owned object whose ref the owner passed to a borrower is
  // freed exactly once, and only when neither the owner nor the borrower holds
  // it any more, whatever order the owner's own release, the borrower's
  // addBorrower and its removeBorrower arrive in (add before remove: one
  // connection), and a removeBorrower repeated after the free changes nothing.
  enum Event { kOwnerRelease, kBorrowerAdd, kBorrowerRemove };
  std::array<Event, 3> order = {kOwnerRelease, kBorrowerAdd, kBorrowerRemove};
  int orders = 0;
  do {
    auto add_at = std::find(order.begin(), order.end(), kBorrowerAdd);
    auto remove_at = std::find(order.begin(), order.end(), kBorrowerRemove);
    if (remove_at < add_at) continue;  // one connection: the add comes first
    ++orders;
    OwnerRig rig;
    BorrowerRegistry borrowers;
    const ObjectId id = ObjectId::ForPut();
    const uint64_t conn = 7;
    rig.refs.AddLocalRef(id, kOwner, /*decoded=*/false);
    rig.MakeStored(id);
    rig.refs.MarkEscaped(id);  // the ref goes into a task's arguments
    bool owner_holds = true;
    bool borrower_holds = false;
    for (Event event : order) {
      REQUIRE(rig.freed.empty());
      switch (event) {
        case kOwnerRelease:
          rig.refs.RemoveLocalRef(id);
          owner_holds = false;
          break;
        case kBorrowerAdd:
          rig.refs.ApplyBorrowerDelta(id, borrowers.Apply(conn, id, +1));
          borrower_holds = true;
          break;
        case kBorrowerRemove:
          rig.refs.ApplyBorrowerDelta(id, borrowers.Apply(conn, id, -1));
          borrower_holds = false;
          break;
      }
      // Never freed while someone holds it (or may still claim the escape).
      if (owner_holds || borrower_holds || event != order.back()) {
        CHECK(rig.freed.empty());
        CHECK(rig.Known(id));
      }
    }
    REQUIRE(rig.freed.size() == 1);
    CHECK(rig.freed[0].id == id);
    CHECK(rig.freed[0].owned);
    CHECK(rig.freed[0].stored);
    CHECK(rig.freed[0].copies == std::vector<std::string>{"nodeA", "nodeB"});
    CHECK_FALSE(rig.Known(id));
    // The borrower's removeBorrower resent after the free, and its connection
    // closing: nothing more is freed.
    rig.refs.ApplyBorrowerDelta(id, borrowers.Apply(conn, id, -1));
    for (const auto& [object, delta] : borrowers.DropConnection(conn)) {
      rig.refs.ApplyBorrowerDelta(object, delta);
    }
    rig.refs.ApplyBorrowerDelta(id, -1);
    CHECK(rig.freed.size() == 1);
  } while (std::next_permutation(order.begin(), order.end()));
  CHECK(orders == 3);
}

TEST_CASE("a borrower registers with the owner once and releases once", "[worker][refs]") {
  // Invariant: a process decoding refs to another owner's object sends one
  // addBorrower for its first decoded ref and one removeBorrower when its last
  // local ref goes, however many refs it holds meanwhile; a ref passed on
  // tells the owner to pin it (escape) before that release.
  OwnerRig rig;  // here the process is a borrower of kOtherOwner's object
  const ObjectId id = ObjectId::ForPut();
  rig.refs.AddLocalRef(id, kOtherOwner, /*decoded=*/true);
  rig.refs.AddLocalRef(id, kOtherOwner, /*decoded=*/true);
  rig.refs.AddLocalRef(id, kOtherOwner, /*decoded=*/false);
  REQUIRE(rig.borrower_changes == std::vector<std::pair<std::string, bool>>{{kOtherOwner, true}});
  rig.refs.MarkEscaped(id);
  REQUIRE(rig.escapes == std::vector<std::string>{kOtherOwner});
  rig.refs.RemoveLocalRef(id);
  rig.refs.RemoveLocalRef(id);
  REQUIRE(rig.borrower_changes.size() == 1);
  rig.refs.RemoveLocalRef(id);
  REQUIRE(rig.borrower_changes ==
          std::vector<std::pair<std::string, bool>>{{kOtherOwner, true}, {kOtherOwner, false}});
  // A borrowed entry going is not an owned free: nothing to delete.
  REQUIRE(rig.freed.size() == 1);
  CHECK_FALSE(rig.freed[0].owned);
  CHECK_FALSE(rig.freed[0].stored);
}

TEST_CASE("a ref to our own object decoded after its free reads as lost", "[worker][refs]") {
  // Invariant: an owned object freed before a serialised ref to it is read is
  // never waited for: the decoded ref finds a failed (OBJECT_LOST) entry.
  OwnerRig rig;
  const ObjectId id = ObjectId::ForPut();
  rig.refs.AddLocalRef(id, kOwner, /*decoded=*/true);
  ObjectTable::Locked objects(rig.table);
  const ObjectEntry& e = *objects->find_value(id);
  CHECK(e.ready.load());
  CHECK(e.kind == ObjectEntry::Kind::kFailed);
  CHECK(e.failure->kind == proto::FailureKind::OBJECT_LOST);
}

TEST_CASE("an object with pending on_ready callbacks is freed only after they ran",
          "[worker][refs]") {
  // Invariant: a task waiting on an object (an on_ready callback) keeps it, and
  // the free happens on MaybeFree once the callbacks were taken.
  OwnerRig rig;
  const ObjectId id = ObjectId::ForPut();
  rig.refs.AddLocalRef(id, kOwner, /*decoded=*/false);
  {
    ObjectTable::Locked objects(rig.table);
    objects->find_value(id)->on_ready.push_back([] {});
  }
  rig.refs.RemoveLocalRef(id);
  REQUIRE(rig.freed.empty());
  {
    ObjectTable::Locked objects(rig.table);
    objects->find_value(id)->on_ready.clear();  // the memory store handed them over
  }
  rig.refs.MaybeFree(id);
  REQUIRE(rig.freed.size() == 1);
  rig.refs.MaybeFree(id);
  CHECK(rig.freed.size() == 1);
}

}  // namespace
}  // namespace lumen::runtime
