// ObjectRecords: the store's job/owner record of each object and its index
// by owner connection.
#include "lumen/objectstore/object_records.h"

#include <algorithm>
#include <vector>

#include <catch2/catch.hpp>

namespace lumen::objectstore {
namespace {

std::vector<ObjectId> Sorted(std::vector<ObjectId> ids) {
  std::sort(ids.begin(), ids.end());
  return ids;
}

TEST_CASE("OwnedBy lists exactly an owner's objects and visits only them", "[object_records]") {
  // Invariant: OwnedBy(o) returns the ids whose record names owner o, as
  // Set, re-Set to another owner and Erase leave them, and costs the number
  // of those ids however many other records there are.
  ObjectRecords records;
  const JobId job = JobId::Random();
  std::vector<ObjectId> mine;
  for (int i = 0; i < 10000; ++i) records.Set(ObjectId::ForPut(), {.job = job, .owner = 2});
  for (int i = 0; i < 10000; ++i) records.Set(ObjectId::ForPut(), {.job = job, .owner = 0});
  for (int i = 0; i < 4; ++i) {
    mine.push_back(ObjectId::ForPut());
    records.Set(mine.back(), {.job = job, .owner = 1});
  }
  CHECK(records.size() == 20004);
  CHECK(records.num_owners() == 2);  // owner 0 is not indexed

  uint64_t before = records.TEST_visited();
  CHECK(Sorted(records.OwnedBy(1)) == Sorted(mine));
  CHECK(records.TEST_visited() - before == mine.size());

  // Re-recording an object under another owner moves it in the index; the
  // same owner again leaves it once.
  records.Set(mine[0], {.job = job, .owner = 3});
  records.Set(mine[1], {.job = JobId::Random(), .owner = 1});
  CHECK(Sorted(records.OwnedBy(3)) == std::vector<ObjectId>{mine[0]});
  CHECK(Sorted(records.OwnedBy(1)) == Sorted({mine[1], mine[2], mine[3]}));
  CHECK(records.Find(mine[1])->job != job);

  // Erasing the last object of an owner drops the owner from the index.
  CHECK(records.Erase(mine[0]));
  CHECK_FALSE(records.Erase(mine[0]));
  CHECK(records.OwnedBy(3).empty());
  CHECK(records.num_owners() == 2);
  CHECK(records.Find(mine[0]) == nullptr);

  before = records.TEST_visited();
  CHECK(records.OwnedBy(0).empty());   // unknown owner: never listed
  CHECK(records.OwnedBy(99).empty());  // no objects
  CHECK(records.TEST_visited() == before);

  for (const ObjectId& id : records.OwnedBy(1)) CHECK(records.Erase(id));
  CHECK(records.num_owners() == 1);
  CHECK(records.size() == 20000);
}

TEST_CASE("an owner's index stays within about twice its live objects under churn",
          "[object_records]") {
  // Invariant: ids erased from an owner's index are dropped before they
  // outnumber the live ones, so OwnedBy's work stays O(live objects); an id
  // erased and recorded again is listed once.
  ObjectRecords records;
  const JobId job = JobId::Random();
  std::vector<ObjectId> live;
  for (int i = 0; i < 10000; ++i) {
    ObjectId id = ObjectId::ForPut();
    records.Set(id, {.job = job, .owner = 5});
    if (i % 100 == 0) {
      live.push_back(id);
    } else {
      CHECK(records.Erase(id));
    }
  }
  ObjectId again = live.front();
  CHECK(records.Erase(again));
  records.Set(again, {.job = job, .owner = 5});
  uint64_t before = records.TEST_visited();
  CHECK(Sorted(records.OwnedBy(5)) == Sorted(live));
  CHECK(records.TEST_visited() - before <= 2 * live.size() + 2);
  // Compacted by that call: the next one looks at the live ids only.
  before = records.TEST_visited();
  CHECK(records.OwnedBy(5).size() == live.size());
  CHECK(records.TEST_visited() - before == live.size());
}

}  // namespace
}  // namespace lumen::objectstore
