// ObjectRecords: the store server's record of who each object belongs to: the
// job that created it (only that job frees it; its objects go when it ends)
// and the connection of the owner (its primary copies go when that connection
// closes), with an index of the objects by owner so that an owner that goes
// costs O(its objects), not O(every object in the store).
//
//   ObjectRecords records;
//   records.Set(id, {.job = job, .owner = conn});
//   if (const ObjectRecords::Record* r = records.Find(id)) ...r->job...
//   for (const ObjectId& id : records.OwnedBy(conn)) Forget(id);  // Erase()s them
//
// Not thread-safe (owned by the store's event loop).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "lumen/common/ids.h"

namespace lumen::objectstore {

class ObjectRecords {
 public:
  struct Record {
    JobId job;           // Nil: a detached actor's object, freed by whoever owns it
    uint64_t owner = 0;  // the owner's connection (a ClientId); 0: unknown (secondary copies)
  };

  // Records `id` (replacing an earlier record of it, and its place in the
  // owner index). O(1).
  void Set(const ObjectId& id, Record record);
  // Forgets `id`; returns whether it had a record. O(1).
  bool Erase(const ObjectId& id);
  // The record of `id`, or nullptr. Valid until the next Set or Erase.
  const Record* Find(const ObjectId& id) const;
  // The objects whose owner is `owner` (never those of owner 0), each once,
  // in no particular order. O(that owner's objects).
  std::vector<ObjectId> OwnedBy(uint64_t owner) const;
  // Calls `fn(id, record)` for every record. O(every object).
  template <typename Fn>
  void ForEach(Fn fn) const {
    for (const auto& [id, record] : records_) fn(id, record);
  }

  size_t size() const { return records_.size(); }
  // Owners with at least one object (the owner index's size).
  size_t num_owners() const { return by_owner_.size(); }
  // For tests: how many index entries OwnedBy has looked at in all (the work it did).
  uint64_t TEST_visited() const { return visited_; }

 private:
  absl::flat_hash_map<ObjectId, Record> records_;
  // An owner's objects, appended as they are recorded. Erase leaves its id
  // here (stale) and counts it, so the index costs one 20-byte id per object
  // (a hash set would cost twice that at its usual load, and the store's
  // target is <= 256 B per small object, doc/runtime.md). A deque, whose
  // fixed blocks never move: a vector's doubling leaves the heap holding
  // its earlier buffers (as much again as the last one). The list is
  // compacted once stale ids could outnumber live ones, so it holds at most
  // about twice its owner's objects. An id erased and recorded again for the
  // same owner may appear twice until then.
  struct Owned {
    std::deque<ObjectId> ids;
    size_t stale = 0;  // ids erased (or moved to another owner) since the last compaction
  };
  // Keeps only the ids of `owned` whose record names `owner`, once each.
  void Compact(uint64_t owner, Owned& owned) const;
  // `id` of `owner` lost its record: counts it stale, compacts when due.
  void Forgotten(uint64_t owner);

  // Owner (not 0) -> its objects; an owner without objects has no entry.
  // Mutable: OwnedBy compacts it.
  mutable absl::flat_hash_map<uint64_t, Owned> by_owner_;
  mutable uint64_t visited_ = 0;
};

}  // namespace lumen::objectstore
