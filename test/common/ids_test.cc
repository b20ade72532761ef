#include "lumen/common/ids.h"

#include <catch2/catch.hpp>
#include <unordered_set>

TEST_CASE("random ids are distinct and round-trip through binary and hex") {
  std::unordered_set<lumen::TaskId> seen;
  for (int i = 0; i < 1000; ++i) REQUIRE(seen.insert(lumen::TaskId::Random()).second);
  lumen::TaskId t = lumen::TaskId::Random();
  REQUIRE(lumen::TaskId::FromBinary(t.Binary()) == t);
  REQUIRE(t.Hex().size() == 32);
  REQUIRE_FALSE(t.IsNil());
  REQUIRE(lumen::TaskId::Nil().IsNil());
  REQUIRE(lumen::TaskId::FromBinary("short").IsNil());
}

TEST_CASE("task return object ids carry their task") {
  lumen::TaskId t = lumen::TaskId::Random();
  lumen::ObjectId a = lumen::ObjectId::ForTaskReturn(t, 1);
  lumen::ObjectId b = lumen::ObjectId::ForTaskReturn(t, 2);
  REQUIRE(a != b);
  REQUIRE(a.Task() == t);
  REQUIRE(lumen::ObjectId::FromBinary(a.Binary()) == a);
}
