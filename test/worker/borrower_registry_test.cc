#include "core/worker/borrower_registry.h"

#include <catch2/catch.hpp>

namespace lumen::runtime {
namespace {

const ObjectId kObject = ObjectId::ForPut();
const ObjectId kOther = ObjectId::ForPut();

TEST_CASE("a borrower's release racing the owner's free is applied once", "[worker][refs]") {
  // Invariant: whatever order a borrower's addBorrower, removeBorrower and its
  // connection closing arrive in (and whether the owner freed the object
  // meanwhile), the owner's borrower count for it changes by exactly what that
  // borrower registered minus what it released: never below, never twice.
  BorrowerRegistry borrowers;
  int owner_count = 0;  // the owner's view of the object's borrowers
  auto apply = [&](uint64_t conn, const ObjectId& id, int delta) {
    int applied = borrowers.Apply(conn, id, delta);
    if (id == kObject) owner_count += applied;
    return applied;
  };
  REQUIRE(apply(1, kObject, +1) == 1);
  REQUIRE(apply(2, kObject, +1) == 1);
  REQUIRE(owner_count == 2);
  // Borrower 1 releases twice (its release crossed the owner's free, then was
  // resent): the second changes nothing.
  REQUIRE(apply(1, kObject, -1) == -1);
  REQUIRE(apply(1, kObject, -1) == 0);
  // A release on a connection that never registered the object (a stray) is ignored.
  REQUIRE(apply(3, kObject, -1) == 0);
  REQUIRE(owner_count == 1);
  // Borrower 2 dies: its connection closing releases what it still held, once.
  auto released = borrowers.DropConnection(2);
  REQUIRE(released.size() == 1);
  REQUIRE(released[0].first == kObject);
  REQUIRE(released[0].second == -1);
  owner_count += released[0].second;
  REQUIRE(owner_count == 0);
  // Its late removeBorrower, after the close, changes nothing.
  REQUIRE(apply(2, kObject, -1) == 0);
  REQUIRE(borrowers.DropConnection(2).empty());
  REQUIRE(owner_count == 0);
  REQUIRE(borrowers.connections() == 0);
}

TEST_CASE("a peer borrowing several objects several times releases each", "[worker][refs]") {
  // Invariant: counts are per connection and object; a release larger than
  // what is held is clamped to it, and a closing connection releases the rest.
  BorrowerRegistry borrowers;
  REQUIRE(borrowers.Apply(7, kObject, +1) == 1);
  REQUIRE(borrowers.Apply(7, kObject, +1) == 1);
  REQUIRE(borrowers.Apply(7, kOther, +1) == 1);
  REQUIRE(borrowers.Apply(7, kObject, -5) == -2);
  REQUIRE(borrowers.connections() == 1);
  auto released = borrowers.DropConnection(7);
  REQUIRE(released == std::vector<std::pair<ObjectId, int>>{{kOther, -1}});
  REQUIRE(borrowers.connections() == 0);
}

}  // namespace
}  // namespace lumen::runtime
