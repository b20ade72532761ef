// Timeouts: the environment overrides, and the cap on timeouts peers send.
#include "lumen/common/timeouts.h"

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <limits>

namespace lumen {
namespace {

using std::chrono::milliseconds;
using std::chrono::nanoseconds;

TEST_CASE("A timeout from the wire is capped before it becomes a duration", "[timeouts]") {
  const milliseconds cap{86'400'000};
  CHECK(CappedWireTimeout(0, cap) == milliseconds(0));
  CHECK(CappedWireTimeout(250, cap) == milliseconds(250));
  CHECK(CappedWireTimeout(86'399'999, cap) == milliseconds(86'399'999));
  CHECK(CappedWireTimeout(86'400'000, cap) == cap);
  // What head_dispatch_fuzzer sent a key-value Wait: as a signed count these
  // are negative, and in nanoseconds they overflowed.
  for (uint64_t hostile : {std::numeric_limits<uint64_t>::max(), uint64_t{1} << 63,
                           uint64_t{0xD000000000000000}, uint64_t{1} << 44}) {
    milliseconds t = CappedWireTimeout(hostile, cap);
    CHECK(t == cap);
    CHECK(std::chrono::duration_cast<nanoseconds>(t).count() > 0);
  }
  CHECK(CappedWireTimeout(5, milliseconds(0)) == milliseconds(0));
  CHECK(CappedWireTimeout(5, milliseconds(-1)) == milliseconds(0));
  // A cap set in code beyond kMaxTimeout is kMaxTimeout.
  CHECK(CappedWireTimeout(std::numeric_limits<uint64_t>::max(), milliseconds::max()) ==
        kMaxTimeout);
}

TEST_CASE("A caller's timeout becomes a deadline without overflow", "[timeouts]") {
  CHECK(ClampTimeout(milliseconds(-5)) == milliseconds(0));
  CHECK(ClampTimeout(milliseconds(5)) == milliseconds(5));
  CHECK(ClampTimeout(milliseconds::max()) == kMaxTimeout);
  CHECK(ClampTimeout(milliseconds::min()) == milliseconds(0));
  auto before = std::chrono::steady_clock::now();
  CHECK(DeadlineAfter(milliseconds::max()) > before + kMaxTimeout / 2);
  CHECK(DeadlineAfter(milliseconds::min()) >= before);
  auto now_deadline = DeadlineAfter(milliseconds(0));
  CHECK(now_deadline <= std::chrono::steady_clock::now());
}

TEST_CASE("A period times a count saturates at kMaxTimeout", "[timeouts]") {
  CHECK(TimesCapped(milliseconds(100), 5) == milliseconds(500));
  CHECK(TimesCapped(milliseconds(0), 5) == milliseconds(0));
  CHECK(TimesCapped(milliseconds(100), 0) == milliseconds(0));
  CHECK(TimesCapped(kMaxTimeout, 3) == kMaxTimeout);
  CHECK(TimesCapped(milliseconds::max(), std::numeric_limits<int>::max()) == kMaxTimeout);
  CHECK(TimesCapped(kMaxTimeout / 4, 4) == kMaxTimeout / 4 * 4);
}

TEST_CASE("Timeouts::FromEnv takes overrides and keeps them convertible to nanoseconds",
          "[timeouts]") {
  ::setenv("LUMEN_HELLO_TIMEOUT_MS", "1234", 1);
  ::setenv("LUMEN_MAX_PARKED_WAIT_MS", "9223372036854775807", 1);  // INT64_MAX ms
  ::setenv("LUMEN_CONNECT_TIMEOUT_MS", "-5", 1);                    // refused: kept
  ::setenv("LUMEN_HEALTH_CHECK_FAILURE_THRESHOLD", "7", 1);
  Timeouts t = Timeouts::FromEnv();
  ::unsetenv("LUMEN_HELLO_TIMEOUT_MS");
  ::unsetenv("LUMEN_MAX_PARKED_WAIT_MS");
  ::unsetenv("LUMEN_CONNECT_TIMEOUT_MS");
  ::unsetenv("LUMEN_HEALTH_CHECK_FAILURE_THRESHOLD");
  CHECK(t.hello_timeout == milliseconds(1234));
  CHECK(t.connect_timeout == Timeouts{}.connect_timeout);
  CHECK(t.health_check_failure_threshold == 7);
  CHECK(t.max_parked_wait == kMaxTimeout);
  // A deadline from it, as a timer makes one, does not overflow.
  auto now = std::chrono::steady_clock::now();
  CHECK(now + t.max_parked_wait > now);
  CHECK(now + 2 * t.max_parked_wait > now);
}

}  // namespace
}  // namespace lumen
