// lumen::Post times each handler it runs and reports, by name, those that held
// their loop longer than SlowHandlerThreshold(). Deterministic: a manual clock
// that only the handlers under test advance, an io_context run on the test's
// own thread, no sleeps.
#include "lumen/common/post.h"

#include <atomic>
#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>

namespace {

using Clock = std::chrono::steady_clock;

// The manual clock Post reads: starts at an arbitrary instant and moves only
// when a handler calls Advance.
std::atomic<Clock::rep> manual_ticks{1'000'000'000};
Clock::time_point ManualNow() { return Clock::time_point(Clock::duration(manual_ticks.load())); }
void Advance(Clock::duration by) { manual_ticks += by.count(); }

struct Report {
  std::string name;
  Clock::duration took;
};

// Installs the manual clock and records every slow-handler report while alive.
class ObservedPosts {
 public:
  ObservedPosts() {
    lumen::TEST_SetPostClock(&ManualNow);
    lumen::TEST_SetSlowHandlerObserver(
        [this](const char* name, Clock::duration took) { reports_.push_back({name, took}); });
  }
  ~ObservedPosts() {
    lumen::TEST_SetSlowHandlerObserver({});
    lumen::TEST_SetPostClock(nullptr);
  }
  const std::vector<Report>& reports() const { return reports_; }

 private:
  std::vector<Report> reports_;  // only on the test's thread (it runs the loop)
};

}  // namespace

TEST_CASE("a handler slower than the threshold is reported with its name and duration") {
  // Invariant: exactly the handlers whose run took longer than the threshold
  // are reported, each once, under the name it was posted with.
  ObservedPosts observed;
  const Clock::duration threshold = lumen::SlowHandlerThreshold();
  boost::asio::io_context io;
  bool ran = false;
  lumen::Post(io, "test.slow_handler", [&] {
    ran = true;
    Advance(threshold + std::chrono::milliseconds(1));
  });
  REQUIRE(observed.reports().empty());  // posted, not run yet
  io.run();
  REQUIRE(ran);
  REQUIRE(observed.reports().size() == 1);
  CHECK(observed.reports()[0].name == "test.slow_handler");
  CHECK(observed.reports()[0].took == threshold + std::chrono::milliseconds(1));
}

TEST_CASE("a handler within the threshold is not reported") {
  // Invariant: a handler that takes the threshold or less is never reported,
  // also when it runs next to a slow one on the same loop.
  ObservedPosts observed;
  const Clock::duration threshold = lumen::SlowHandlerThreshold();
  boost::asio::io_context io;
  int ran = 0;
  lumen::Post(io, "test.instant_handler", [&] { ++ran; });
  lumen::Post(io, "test.at_threshold_handler", [&] {
    ++ran;
    Advance(threshold);
  });
  lumen::Post(io, "test.slow_handler", [&] {
    ++ran;
    Advance(threshold * 2 + std::chrono::milliseconds(1));
  });
  io.run();
  REQUIRE(ran == 3);
  REQUIRE(observed.reports().size() == 1);
  CHECK(observed.reports()[0].name == "test.slow_handler");
}

TEST_CASE("the time spent waiting in the queue does not count") {
  // Invariant: only the handler's own run is measured: time that passes
  // between posting and running (other handlers, the loop not running yet)
  // is not charged to it.
  ObservedPosts observed;
  const Clock::duration threshold = lumen::SlowHandlerThreshold();
  boost::asio::io_context io;
  bool ran = false;
  lumen::Post(io, "test.queued_handler", [&] { ran = true; });
  Advance(threshold * 10);  // the loop is busy elsewhere for a long time
  io.run();
  REQUIRE(ran);
  CHECK(observed.reports().empty());
}
