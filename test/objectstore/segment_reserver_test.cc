// SegmentReserver: the store's pages are reserved up front, on a background
// thread, and the reservation stops (instead of calling the OOM killer) when
// the machine's memory runs short.
#include "lumen/objectstore/segment_reserver.h"

#include <sched.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

#include <catch2/catch.hpp>

namespace lumen::objectstore {
namespace {

constexpr uint64_t kMiB = 1ull << 20;

// Polls `done` until it holds or 10 s pass.
template <typename Pred>
bool WaitFor(Pred done) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!done() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return done();
}

uint64_t BackedBytes(const ShmSegment& seg) {
  struct stat st;
  REQUIRE(fstat(seg.fd(), &st) == 0);
  return static_cast<uint64_t>(st.st_blocks) * 512;
}

TEST_CASE("SegmentReserver backs every page of the segment", "[segment_reserver][chaos]") {
  // Invariant: once done with an OK status, the memfd's allocated blocks cover
  // the whole segment (a later write cannot SIGBUS), reserved_bytes == size;
  // the reserving thread ran under SCHED_IDLE at niceness kNiceness, the
  // caller's thread unchanged.
  auto seg = ShmSegment::Create("lumen-test", 40 * kMiB + 4096);
  REQUIRE(seg.ok());
  REQUIRE(BackedBytes(**seg) == 0);
  // available_memory runs on the reserving thread: it records that thread's niceness.
  const int caller_niceness = ::getpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()));
  std::atomic<int> niceness{-100};
  std::atomic<int> policy{-1};
  SegmentReserver reserver(seg->get(), {.chunk = 8 * kMiB, .available_memory = [&] {
                                          niceness = ::getpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()));
                                          policy = ::sched_getscheduler(0);
                                          return 0ull;
                                        }});
  REQUIRE(WaitFor([&] { return reserver.done(); }));
  CHECK(reserver.status().ok());
  // It reserved at the lowest CPU priority, and only its own thread did.
  CHECK(niceness.load() == SegmentReserver::kNiceness);
  CHECK(policy.load() == SCHED_IDLE);
  CHECK(::sched_getscheduler(0) != SCHED_IDLE);
  CHECK(::getpriority(PRIO_PROCESS, static_cast<id_t>(::gettid())) == caller_niceness);
  CHECK(reserver.reserved_bytes() == (*seg)->size());
  CHECK(BackedBytes(**seg) >= (*seg)->size());
}

TEST_CASE("SegmentReserver stops when the machine's memory runs short", "[segment_reserver][chaos]") {
  // Invariant: the reserver never takes a chunk that would leave less than
  // keep_free available; it stops with ResourceExhausted naming where it
  // stopped, and what it reserved before stays reserved.
  auto seg = ShmSegment::Create("lumen-test", 64 * kMiB);
  REQUIRE(seg.ok());
  std::atomic<int> calls{0};
  // Plenty for two chunks, then the machine "fills up".
  auto available = [&calls]() -> uint64_t { return ++calls <= 2 ? (1ull << 40) : 100 * kMiB; };
  SegmentReserver reserver(seg->get(),
                           {.chunk = 16 * kMiB, .available_memory = available, .keep_free = 128 * kMiB});
  REQUIRE(WaitFor([&] { return reserver.done(); }));
  CHECK(reserver.status().code() == absl::StatusCode::kResourceExhausted);
  CHECK_THAT(std::string(reserver.status().message()),
             Catch::Contains("32.0 MiB of 64.0 MiB") && Catch::Contains("object by object"));
  CHECK(reserver.reserved_bytes() == 32 * kMiB);
  CHECK(BackedBytes(**seg) >= 32 * kMiB);
  CHECK(BackedBytes(**seg) < 64 * kMiB);
}

}  // namespace
}  // namespace lumen::objectstore
