// The owner's object table (ObjectTable, a ShardedNodeMap underneath) holding
// many entries: behaviour, not time.
#include "core/worker/object_table.h"

#include <cstring>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

namespace lumen::runtime {
namespace {

// Ids as a driver makes them: many returns of consecutive-looking tasks.
ObjectId IdOf(uint64_t i) {
  std::string bytes(ObjectId::kSize, '\0');
  std::memcpy(bytes.data(), &i, sizeof(i));
  return ObjectId::FromBinary(bytes);
}

TEST_CASE("ObjectTable keeps many entries findable, stable and iterable", "[object_table]") {
  // Invariant: with 200,000 entries (many growths of every sub-map), each id
  // finds its own entry, at the address it got when inserted; iteration visits
  // each entry once; erase by iterator and by key removes exactly that entry;
  // no sub-map holds much more than its share (a growth rehashes a fraction).
  constexpr uint64_t kN = 200000;
  ObjectTable table;
  std::vector<ObjectEntry*> where(kN);
  {
    ObjectTable::Locked objects(table);
    for (uint64_t i = 0; i < kN; ++i) {
      auto [it, inserted] = objects->try_emplace(IdOf(i));
      REQUIRE(inserted);
      it->second.local_refs = static_cast<int>(i);
      where[i] = &it->second;
    }
    CHECK_FALSE(objects->try_emplace(IdOf(7)).second);  // already there
    REQUIRE(objects->size() == kN);
    CHECK(objects->max_shard_size() < 2 * kN / ObjectTable::Map::shards());
    for (uint64_t i = 0; i < kN; ++i) {
      auto it = objects->find(IdOf(i));
      REQUIRE(it != objects->end());
      REQUIRE(&it->second == where[i]);  // nodes stay put across growth
      REQUIRE(it->second.local_refs == static_cast<int>(i));
    }
    CHECK(objects->find(IdOf(kN)) == objects->end());
    std::vector<char> seen(kN, 0);
    size_t visited = 0;
    for (auto& [id, e] : *objects) {
      ++visited;
      REQUIRE(e.local_refs >= 0);
      REQUIRE(static_cast<uint64_t>(e.local_refs) < kN);
      REQUIRE(seen[e.local_refs] == 0);
      seen[e.local_refs] = 1;
    }
    CHECK(visited == kN);
    // Erase the even ones by iterator, every third odd one by key.
    for (uint64_t i = 0; i < kN; i += 2) objects->erase(objects->find(IdOf(i)));
    size_t by_key = 0;
    for (uint64_t i = 1; i < kN; i += 6) by_key += objects->erase(IdOf(i));
    CHECK(objects->erase(IdOf(0)) == 0);
    REQUIRE(objects->size() == kN / 2 - by_key);
    for (uint64_t i = 0; i < kN; ++i) {
      const bool kept = i % 2 == 1 && i % 6 != 1;
      REQUIRE(objects->contains(IdOf(i)) == kept);
      if (kept) REQUIRE(objects->find_value(IdOf(i)) == where[i]);
    }
    size_t left = 0;
    for (const auto& entry : *objects) left += entry.second.local_refs % 2 == 1;
    CHECK(left == objects->size());
  }
}

TEST_CASE("ObjectTable gives back its slots after a burst", "[object_table]") {
  // Invariant: after 200,000 inserts and all but 1,000 erased (a burst of puts
  // freed), the sub-maps shrink to a few times what is left, so a lookup stays
  // within a small, cached table; the entries left keep their addresses and
  // values through the shrinking; erasing the rest frees every slot.
  constexpr uint64_t kN = 200000, kKept = 1000;
  ObjectTable table;
  ObjectTable::Locked objects(table);
  std::vector<ObjectEntry*> where(kN);
  for (uint64_t i = 0; i < kN; ++i) {
    auto it = objects->try_emplace(IdOf(i)).first;
    it->second.local_refs = static_cast<int>(i);
    where[i] = &it->second;
  }
  const size_t grown = objects->capacity();
  REQUIRE(grown >= kN);
  // Keep every 200th: erase the others, half by iterator, half by key.
  for (uint64_t i = 0; i < kN; ++i) {
    if (i % (kN / kKept) == 0) continue;
    if (i % 2 == 0) {
      objects->erase(objects->find(IdOf(i)));
    } else {
      REQUIRE(objects->erase(IdOf(i)) == 1);
    }
  }
  REQUIRE(objects->size() == kKept);
  // Each sub-map: at most 8 slots an entry, or fewer than kShrinkCapacity.
  const size_t bound = 8 * kKept + ObjectTable::Map::shards() * ObjectTable::Map::kShrinkCapacity;
  CHECK(objects->capacity() <= bound);
  CHECK(objects->capacity() * 20 < grown);
  for (uint64_t i = 0; i < kN; i += kN / kKept) {
    REQUIRE(objects->find_value(IdOf(i)) == where[i]);  // nodes stay put across shrinking
    REQUIRE(where[i]->local_refs == static_cast<int>(i));
  }
  for (uint64_t i = 0; i < kN; i += kN / kKept) objects->erase(IdOf(i));
  CHECK(objects->empty());
  CHECK(objects->capacity() <= ObjectTable::Map::shards() * ObjectTable::Map::kShrinkCapacity);
}

TEST_CASE("ObjectTable iteration of an empty or nearly empty table", "[object_table]") {
  // Invariant: begin() == end() when empty; one entry is visited exactly once
  // whichever sub-map holds it.
  ObjectTable table;
  ObjectTable::Locked objects(table);
  CHECK(objects->begin() == objects->end());
  CHECK(objects->empty());
  for (uint64_t i = 0; i < 100; ++i) {
    objects->try_emplace(IdOf(i));
    size_t n = 0;
    for (auto it = objects->begin(); it != objects->end(); ++it) ++n;
    REQUIRE(n == 1);
    objects->erase(objects->begin());
    REQUIRE(objects->empty());
  }
}

}  // namespace
}  // namespace lumen::runtime
