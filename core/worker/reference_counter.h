// The reference counter of one driver or worker process (Ray's
// ReferenceCounter, smaller): local references, borrowers of the objects this
// process owns, references serialised into values and not yet claimed
// ("escapes"), and the borrower registration this process owes the owners of
// the objects it borrows. When nothing needs an object any more its entry goes
// and the counter says so through `on_freed`.
//
//   ReferenceCounter refs(table, {.on_freed = ..., .send_borrower_change = ...,
//                                 .send_escape = ...});
//   refs.SetSelfAddress(my_address);
//   refs.AddLocalRef(id, my_address, /*decoded=*/false);
//   refs.RemoveLocalRef(id);   // on_freed(id, ...) once nothing else holds it
//
// Thread-safe: every method takes the object table's lock. Internal to core/worker.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/worker/object_table.h"
#include "lumen/common/ids.h"

namespace lumen::runtime {

class ReferenceCounter {
 public:
  // An entry that just left the table.
  struct Freed {
    ObjectId id;
    bool owned = false;
    // Owned and stored: the daemon addresses of its copies, to delete.
    bool stored = false;
    std::vector<std::string> copies;
    bool is_actor = false;  // owned: the handle of an actor we created
  };
  struct Callbacks {
    // Runs once per freed entry, with the table's lock held (must not touch the
    // table: post instead).
    std::function<void(Freed)> on_freed;
    // We start (add) or stop borrowing an object of `owner`; runs without the lock.
    std::function<void(const ObjectId&, const std::string& owner, bool add)>
        send_borrower_change;
    // A borrowed reference was serialised into a value: `owner` pins it for
    // the reader. Runs without the lock.
    std::function<void(const ObjectId&, const std::string& owner)> send_escape;
  };

  // `table` outlives the counter.
  ReferenceCounter(ObjectTable& table, Callbacks callbacks);

  // This process's owner address (objects whose owner it is are ours). Set
  // once, before the first reference is added.
  void SetSelfAddress(std::string address) { self_address_ = std::move(address); }

  // A reference to `id` (owned by `owner`) appears here; `decoded`: read out
  // of a value, which claims an escape (ours) or makes us a borrower (theirs).
  // Returns its entry, which stays put until this reference is removed.
  ObjectEntry* AddLocalRef(const ObjectId& id, const std::string& owner, bool decoded);
  void RemoveLocalRef(const ObjectId& id);
  // A local reference is being serialised into a value.
  void MarkEscaped(const ObjectId& id);
  // Owner side: a borrower passed our object on (escapeRef).
  void OnEscapeRef(const ObjectId& id);
  // Owner side: an owned object's borrower count changes by `delta` (frees it
  // at zero).
  void ApplyBorrowerDelta(const ObjectId& id, int delta);
  // Frees `id` if nothing needs it any more (after its on_ready callbacks ran).
  void MaybeFree(const ObjectId& id);
  // The same, for a caller already holding the table's lock.
  void MaybeFreeLocked(ObjectTable::Locked& objects, ObjectTable::Map::iterator it);

 private:
  ObjectTable& table_;
  const Callbacks callbacks_;
  std::string self_address_;  // written once before use, then read-only
};

}  // namespace lumen::runtime
