// The objects each inbound peer borrows from this owner, with counts, so that
// a release is applied only against what that peer registered and a peer that
// goes away releases exactly what it still held.
//
//   BorrowerRegistry borrowers;
//   int applied = borrowers.Apply(conn_id, id, +1);   // addBorrower: +1
//   applied = borrowers.Apply(conn_id, id, -1);       // removeBorrower: -1, or 0 if stray
//   for (auto [id, n] : borrowers.DropConnection(conn_id)) ...   // the peer closed
//
// Invariant: per connection and object the count never goes below zero, and
// the sum of what Apply and DropConnection return for it is the number of
// registrations it made minus the releases that matched one.
//
// Only on the io thread; not thread-safe.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "lumen/common/ids.h"

namespace lumen::runtime {

class BorrowerRegistry {
 public:
  // The peer on connection `conn` registers (`delta` > 0) or releases
  // (`delta` < 0) `id`. Returns the change to apply to the object's borrower
  // count: a release beyond what this connection registered is clamped, and
  // one for an object it never registered (a duplicate, a stray) returns 0.
  int Apply(uint64_t conn, const ObjectId& id, int delta);
  // The connection closed: every object it still borrows, with the (negative)
  // change to apply to its borrower count. Forgets the connection.
  std::vector<std::pair<ObjectId, int>> DropConnection(uint64_t conn);
  // Connections holding at least one object.
  size_t connections() const { return by_conn_.size(); }

 private:
  absl::flat_hash_map<uint64_t, absl::flat_hash_map<ObjectId, int>> by_conn_;
};

}  // namespace lumen::runtime
