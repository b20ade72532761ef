#include "lumen/objectstore/object_records.h"

#include "absl/container/flat_hash_set.h"

namespace lumen::objectstore {

void ObjectRecords::Set(const ObjectId& id, Record record) {
  auto [it, fresh] = records_.try_emplace(id, record);
  if (!fresh) {
    const uint64_t before = it->second.owner;
    it->second = record;
    if (before == record.owner) return;  // already in its owner's list
    if (before != 0) Forgotten(before);
  }
  if (record.owner != 0) by_owner_[record.owner].ids.push_back(id);
}

bool ObjectRecords::Erase(const ObjectId& id) {
  auto it = records_.find(id);
  if (it == records_.end()) return false;
  const uint64_t owner = it->second.owner;
  records_.erase(it);
  if (owner != 0) Forgotten(owner);
  return true;
}

const ObjectRecords::Record* ObjectRecords::Find(const ObjectId& id) const {
  auto it = records_.find(id);
  return it == records_.end() ? nullptr : &it->second;
}

std::vector<ObjectId> ObjectRecords::OwnedBy(uint64_t owner) const {
  if (owner == 0) return {};
  auto owned = by_owner_.find(owner);
  if (owned == by_owner_.end()) return {};
  visited_ += owned->second.ids.size();
  if (owned->second.stale > 0) Compact(owner, owned->second);
  return std::vector<ObjectId>(owned->second.ids.begin(), owned->second.ids.end());
}

void ObjectRecords::Forgotten(uint64_t owner) {
  auto owned = by_owner_.find(owner);
  if (owned == by_owner_.end()) return;
  Owned& o = owned->second;
  ++o.stale;
  if (o.stale >= o.ids.size()) {  // nothing of it is left
    by_owner_.erase(owned);
    return;
  }
  // Amortised O(1) per Erase: a compaction looks at ids.size() entries, of
  // which more than half were erased since the last one.
  if (2 * o.stale > o.ids.size()) {
    Compact(owner, o);
    if (o.ids.empty()) by_owner_.erase(owned);
  }
}

void ObjectRecords::Compact(uint64_t owner, Owned& owned) const {
  absl::flat_hash_set<ObjectId> kept;
  size_t out = 0;
  for (const ObjectId& id : owned.ids) {
    auto it = records_.find(id);
    if (it == records_.end() || it->second.owner != owner || !kept.insert(id).second) continue;
    owned.ids[out++] = id;
  }
  owned.ids.resize(out);
  owned.ids.shrink_to_fit();
  owned.stale = 0;
}

}  // namespace lumen::objectstore
