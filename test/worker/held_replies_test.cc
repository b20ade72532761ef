// HeldReplies: the replies an executor holds go out in order, for one
// connection at a time, within the bounds, and the buffer is reused.
#include "core/worker/held_replies.h"

#include <memory>
#include <string>

#include <catch2/catch.hpp>

namespace lumen::runtime {
namespace {

// A distinct owner for each connection (only compared, never used).
std::shared_ptr<Connection> FakeConnection() {
  return std::shared_ptr<Connection>(std::make_shared<int>(0), nullptr);
}

TEST_CASE("HeldReplies holds one connection's frames in order and keeps its buffer",
          "[worker][held_replies]") {
  auto a = FakeConnection(), b = FakeConnection();
  std::weak_ptr<Connection> to_a = a, to_b = b;
  HeldReplies held;
  CHECK(held.empty());
  CHECK_FALSE(held.For(to_a));
  REQUIRE(held.TryHold(to_a, "first.", 8));
  REQUIRE(held.TryHold(to_a, "second.", 8));
  CHECK_FALSE(held.TryHold(to_b, "other.", 8));  // would mix connections
  CHECK(held.For(to_a));
  CHECK_FALSE(held.For(to_b));
  CHECK(held.count() == 2);
  CHECK_FALSE(held.TryHold(to_a, "third.", 2));  // past max_frames
  held.Append(to_a, "third.");                   // the caller sends right after
  CHECK(held.frames() == "first.second.third.");
  CHECK(held.count() == 3);

  const char* buffer = held.frames().data();
  held.Clear();
  CHECK(held.empty());
  CHECK(held.frames().empty());
  CHECK_FALSE(held.For(to_a));
  // The next batch, for another connection, reuses the buffer.
  REQUIRE(held.TryHold(to_b, "next.", 8));
  CHECK(held.For(to_b));
  CHECK(held.frames() == "next.");
  CHECK(held.frames().data() == buffer);
}

TEST_CASE("HeldReplies refuses a frame that would pass kMaxBytes", "[worker][held_replies]") {
  auto a = FakeConnection();
  std::weak_ptr<Connection> to_a = a;
  HeldReplies held;
  REQUIRE(held.TryHold(to_a, std::string(HeldReplies::kMaxBytes - 10, 'x'), 8));
  CHECK_FALSE(held.TryHold(to_a, std::string(11, 'y'), 8));
  CHECK(held.TryHold(to_a, std::string(10, 'y'), 8));
  CHECK(held.frames().size() == HeldReplies::kMaxBytes);
}

}  // namespace
}  // namespace lumen::runtime
