// Remote tasks on a real embedded cluster: registration, argument and return
// types, futures as arguments, nesting, and volume.
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>
#include <map>
#include <numeric>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "lumen/common/head_client.h"
#include "lumen/common/process.h"
#include "lumen/lumen.h"
#include "test/core/test_support.h"

namespace {

struct Point {
  double x = 0;
  double y = 0;
  std::string label;
  LUMEN_SERIALIZE(x, y, label);
};

int Zero() { return 0; }
int Add(int a, int b) { return a + b; }
int AddMany(int a, int b, int c, int d, int e, int f) { return a + b + c + d + e + f; }
std::string Concat(std::string a, const std::string& b) { return a + b; }
std::map<std::string, std::vector<int>> Histogram(std::vector<std::string> words) {
  std::map<std::string, std::vector<int>> out;
  for (size_t i = 0; i < words.size(); ++i) out[words[i]].push_back(static_cast<int>(i));
  return out;
}
Point Midpoint(Point a, Point b) { return Point{(a.x + b.x) / 2, (a.y + b.y) / 2, a.label + b.label}; }
std::optional<std::tuple<int, double, bool>> MaybeTuple(bool present) {
  if (!present) return std::nullopt;
  return std::make_tuple(7, 2.5, true);
}
// Returns once the gate file exists (simulated work; bounded).
void Nothing(std::string gate) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!std::filesystem::exists(gate) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}
int GatedOne(std::string gate) {
  Nothing(std::move(gate));
  return 1;
}
int Pid() { return static_cast<int>(::getpid()); }
// How many Get/Wait calls of this worker spun before blocking while this task
// waited 20 ms on a gated task (its own: nothing else waits in this process).
int SpinsOfGatedWait(std::string gate) {
  uint64_t before = lumen::internal::BlockSpinsForTesting();
  auto gated = lumen::Task(GatedOne).Remote(std::move(gate));
  auto waited = lumen::Wait(std::vector{gated}, 1, std::chrono::milliseconds(20));
  if (!waited.ready.empty()) return -1;  // the gate was open: nothing was waited for
  return static_cast<int>(lumen::internal::BlockSpinsForTesting() - before);
}
int Square(int x) { return x * x; }
int Increment(int x) { return x + 1; }

// Each level submits a child task and blocks in Get on it: with one CPU this
// only finishes if a blocked worker gives its CPU back.
int NestedDepth(int depth) {
  if (depth == 0) return 0;
  return 1 + *lumen::Get(lumen::Task(NestedDepth).Remote(depth - 1));
}

// The pids of the workers running each level of a nested chain, innermost
// first: every level blocks in Get while the next one runs.
std::vector<int> NestedPids(int depth) {
  std::vector<int> pids;
  if (depth > 0) pids = *lumen::Get(lumen::Task(NestedPids).Remote(depth - 1));
  pids.push_back(static_cast<int>(::getpid()));
  return pids;
}

int SumOfSquaresViaTasks(int n) {
  std::vector<lumen::ObjectRef<int>> refs;
  for (int i = 0; i < n; ++i) refs.push_back(lumen::Task(Square).Remote(i));
  int total = 0;
  for (const auto& v : lumen::Get(refs)) total += *v;
  return total;
}

}  // namespace

LUMEN_REMOTE(Zero, Add, AddMany, Concat, Histogram, Midpoint, MaybeTuple, Nothing, GatedOne, Pid,
             SpinsOfGatedWait, Square, Increment, NestedDepth, NestedPids, SumOfSquaresViaTasks);

using lumen::test::ScopedCluster;

TEST_CASE("tasks run in separate worker processes and return their values") {
  ScopedCluster cluster;
  REQUIRE(*lumen::Get(lumen::Task(Zero).Remote()) == 0);
  REQUIRE(*lumen::Get(lumen::Task(Add).Remote(2, 3)) == 5);
  REQUIRE(*lumen::Get(lumen::Task(AddMany).Remote(1, 2, 3, 4, 5, 6)) == 21);
  REQUIRE(*lumen::Get(lumen::Task(Concat).Remote(std::string("foo"), std::string("bar"))) ==
          "foobar");
  int worker_pid = *lumen::Get(lumen::Task(Pid).Remote());
  REQUIRE(worker_pid != ::getpid());
  REQUIRE(worker_pid > 0);
}

TEST_CASE("containers optionals tuples and LUMEN_SERIALIZE structs cross processes") {
  ScopedCluster cluster;
  auto hist = *lumen::Get(
      lumen::Task(Histogram).Remote(std::vector<std::string>{"a", "b", "a", "c", "a"}));
  REQUIRE(hist["a"] == std::vector<int>{0, 2, 4});
  REQUIRE(hist["b"] == std::vector<int>{1});
  REQUIRE(hist.size() == 3);
  Point mid = *lumen::Get(lumen::Task(Midpoint).Remote(Point{0, 0, "p"}, Point{2, 4, "q"}));
  REQUIRE(mid.x == 1.0);
  REQUIRE(mid.y == 2.0);
  REQUIRE(mid.label == "pq");
  auto some = *lumen::Get(lumen::Task(MaybeTuple).Remote(true));
  REQUIRE(some.has_value());
  REQUIRE(std::get<0>(*some) == 7);
  REQUIRE(std::get<1>(*some) == 2.5);
  REQUIRE_FALSE(lumen::Get(lumen::Task(MaybeTuple).Remote(false))->has_value());
}

TEST_CASE("a void task completes and Get waits for it") {
  ScopedCluster cluster;
  std::string gate = cluster.session_dir() + "/gate";
  lumen::ObjectRef<void> done = lumen::Task(Nothing).Remote(gate);
  REQUIRE_THROWS_AS(lumen::Get(done, std::chrono::milliseconds(200)), lumen::GetTimeoutError);
  std::ofstream(gate) << "open";
  REQUIRE_NOTHROW(lumen::Get(done, std::chrono::seconds(30)));
}

TEST_CASE("10000 tasks all return the right results") {
  ScopedCluster cluster;
  std::vector<lumen::ObjectRef<int>> refs;
  refs.reserve(10000);
  for (int i = 0; i < 10000; ++i) refs.push_back(lumen::Task(Square).Remote(i));
  auto values = lumen::Get(refs);
  REQUIRE(values.size() == 10000);
  for (int i = 0; i < 10000; ++i) REQUIRE(*values[i] == i * i);
}

TEST_CASE("futures as arguments: a dependency chain of 200 tasks") {
  ScopedCluster cluster;
  lumen::ObjectRef<int> ref = lumen::Task(Increment).Remote(0);
  for (int i = 1; i < 200; ++i) ref = lumen::Task(Increment).Remote(ref);
  REQUIRE(*lumen::Get(ref) == 200);
  // A fan-in over a Put value and task results.
  auto base = lumen::Put(10);
  auto a = lumen::Task(Add).Remote(base, lumen::Task(Square).Remote(3));
  REQUIRE(*lumen::Get(a) == 19);
}

TEST_CASE("nested tasks do not deadlock on one CPU") {
  // Invariant: a worker blocked in Get releases its CPU, so a chain of nested
  // tasks deeper than the CPU count still completes.
  lumen::Config config = ScopedCluster::DefaultConfig();
  config.num_cpus = 1;
  ScopedCluster cluster(config);
  REQUIRE(*lumen::Get(lumen::Task(NestedDepth).Remote(6), std::chrono::seconds(60)) == 6);
  REQUIRE(*lumen::Get(lumen::Task(SumOfSquaresViaTasks).Remote(50)) == 40425);
}

TEST_CASE("a function missing from the worker binary fails with its name and the binary") {
  ScopedCluster cluster;
  lumen::ObjectRef<int> ref(lumen::internal::SubmitTask("NotRegisteredAnywhere", {}, {}));
  try {
    lumen::Get(ref);
    FAIL("Get should throw");
  } catch (const lumen::TaskError& e) {
    std::string what = e.what();
    REQUIRE(what.find("NotRegisteredAnywhere") != std::string::npos);
    REQUIRE(what.find("runtime_test") != std::string::npos);
    REQUIRE(what.find("LUMEN_REMOTE") != std::string::npos);
  }
}

TEST_CASE("Task of an unregistered function throws at the call site") {
  ScopedCluster cluster;
  auto unregistered = +[](int x) { return x; };
  REQUIRE_THROWS_AS(lumen::Task(unregistered), lumen::Error);
}

TEST_CASE("workers started beyond the pool exit once idle") {
  // Invariant: nested tasks make the node start workers beyond its CPU count;
  // when they go idle, the node returns to its pool size.
  ::setenv("LUMEN_WORKER_IDLE_TIMEOUT_MS", "200", 1);
  lumen::Config config = ScopedCluster::DefaultConfig();
  config.num_cpus = 1;
  ScopedCluster cluster(config);
  ::unsetenv("LUMEN_WORKER_IDLE_TIMEOUT_MS");
  auto workers = [] {
    auto nodes = lumen::runtime::QueryNodes(lumen::internal::ClusterAddress());
    if (!nodes.ok() || nodes->empty()) return -1;
    auto stats = lumen::runtime::QueryNodeStats(nodes->front().address);
    return stats.ok() ? static_cast<int>(stats->workers) : -1;
  };
  // What the tasks recorded while they ran: five levels in five distinct
  // worker processes, on a one-CPU node.
  auto pids = *lumen::Get(lumen::Task(NestedPids).Remote(4));
  REQUIRE(pids.size() == 5);
  REQUIRE(std::set<int>(pids.begin(), pids.end()).size() == 5);
  // Once idle, the node returns to its pool size: the surplus workers exit.
  REQUIRE(lumen::test::WaitUntil([&] { return workers() == 1; }, std::chrono::seconds(60)));
  int alive = 0;
  for (int pid : pids) alive += lumen::ProcessAlive(pid) ? 1 : 0;
  REQUIRE(alive <= 1);
  REQUIRE(*lumen::Get(lumen::Task(Square).Remote(7)) == 49);
}

// Issue 17: a Get or Wait of N refs registers one waiter on the objects that
// are not ready and is counted down once per object as it becomes ready. It
// never rescans the list per completion (the old wait re-evaluated a condition
// over the ready prefix on every unlock of the runtime's mutex: about N^2/2
// entries for a Get of N queued tasks, 2e8 for 20,000). Counted, not timed.
TEST_CASE("Get and Wait of many refs take steps linear in the refs, not per completion") {
  ScopedCluster cluster;
  constexpr uint64_t kN = 20000;
  auto submit = [](uint64_t n) {
    std::vector<lumen::ObjectRef<int>> refs;
    refs.reserve(n);
    for (uint64_t i = 0; i < n; ++i) refs.push_back(lumen::Task(Square).Remote(int(i % 1000)));
    return refs;
  };
  {
    auto refs = submit(kN);
    uint64_t before = lumen::internal::AwaitStepsForTesting();
    auto values = lumen::Get(refs);
    uint64_t steps = lumen::internal::AwaitStepsForTesting() - before;
    INFO("steps for a Get of " << kN << " refs: " << steps);
    REQUIRE(values.size() == kN);
    for (uint64_t i = 0; i < kN; ++i) REQUIRE(*values[i] == int(i % 1000) * int(i % 1000));
    // A scan on entry, at most one countdown per ref, nothing to unregister (2N).
    REQUIRE(steps <= 3 * kN);
  }
  {
    // Wait for half, then Get the rest: each call one scan plus its countdowns
    // plus (Wait) unregistering from what is still pending.
    auto refs = submit(kN);
    uint64_t before = lumen::internal::AwaitStepsForTesting();
    auto half = lumen::Wait(refs, kN / 2);
    REQUIRE(half.ready.size() == kN / 2);
    REQUIRE(half.ready.size() + half.unready.size() == kN);
    lumen::Get(half.unready);
    uint64_t steps = lumen::internal::AwaitStepsForTesting() - before;
    INFO("steps for Wait(" << kN << ", " << kN / 2 << ") then Get of the rest: " << steps);
    REQUIRE(steps <= 5 * kN);
  }
  {
    // Wait(refs, 1) over a shrinking list: each call costs O(its length) (one
    // scan, one unregistration), however many tasks complete meanwhile.
    auto refs = submit(2000);
    uint64_t before = lumen::internal::AwaitStepsForTesting();
    uint64_t scanned = 0;
    size_t calls = 0;
    while (!refs.empty()) {
      scanned += refs.size();
      ++calls;
      auto result = lumen::Wait(refs, 1);
      REQUIRE(result.ready.size() == 1);
      refs = std::move(result.unready);
    }
    uint64_t steps = lumen::internal::AwaitStepsForTesting() - before;
    INFO(calls << " calls of Wait(refs, 1) over " << scanned << " refs in all: " << steps
               << " steps");
    REQUIRE(steps <= 3 * scanned);
  }
  {
    // Several threads Get overlapping lists at once; each is woken once.
    auto refs = submit(4000);
    uint64_t before = lumen::internal::AwaitStepsForTesting();
    std::vector<std::thread> threads;
    std::vector<int> sums(4, 0);
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&, t] {
        std::vector<lumen::ObjectRef<int>> mine(refs.begin() + t * 500, refs.end());
        for (const auto& v : lumen::Get(mine)) sums[t] += *v;
      });
    }
    for (auto& thread : threads) thread.join();
    uint64_t steps = lumen::internal::AwaitStepsForTesting() - before;
    int expected = 0;
    for (int i = 1500; i < 4000; ++i) expected += (i % 1000) * (i % 1000);
    REQUIRE(sums[3] == expected);
    REQUIRE(steps <= 2 * 4 * 4000);
  }
}

TEST_CASE("a task's Get or Wait spins before it blocks, a driver's blocks at once") {
  // Invariant: a driver thread that must wait blocks without spinning (a spin
  // there only took the CPU from the threads bringing its value: the
  // synchronous round trips ran 16-37 % faster without it on 2 cores); a
  // task's thread, whose block tells the node, spins first.
  ScopedCluster cluster;
  std::string gate = cluster.session_dir() + "/gate";
  auto gated = lumen::Task(GatedOne).Remote(gate);
  uint64_t before = lumen::internal::BlockSpinsForTesting();
  REQUIRE(lumen::Wait(std::vector{gated}, 1, std::chrono::milliseconds(20)).ready.empty());
  REQUIRE_THROWS_AS(lumen::Get(gated, std::chrono::milliseconds(20)), lumen::GetTimeoutError);
  CHECK(lumen::internal::BlockSpinsForTesting() == before);
  CHECK(*lumen::Get(lumen::Task(SpinsOfGatedWait).Remote(gate)) == 1);
  std::ofstream(gate) << "open";
  REQUIRE(*lumen::Get(gated) == 1);
}

TEST_CASE("a Get or Wait that times out unregisters and the objects still fill later") {
  ScopedCluster cluster;
  std::string gate = cluster.session_dir() + "/gate";
  std::vector<lumen::ObjectRef<int>> gated;
  for (int i = 0; i < 3; ++i) gated.push_back(lumen::Task(GatedOne).Remote(gate));
  auto fast = lumen::Task(Square).Remote(3);
  REQUIRE_THROWS_AS(lumen::Get(gated, std::chrono::milliseconds(100)), lumen::GetTimeoutError);
  auto waited = lumen::Wait(gated, 2, std::chrono::milliseconds(100));
  REQUIRE(waited.ready.empty());
  REQUIRE(waited.unready.size() == 3);
  // From other threads too, at the same time.
  std::vector<std::thread> threads;
  std::atomic<int> timed_out{0};
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&] {
      try {
        lumen::Get(gated, std::chrono::milliseconds(50));
      } catch (const lumen::GetTimeoutError&) {
        ++timed_out;
      }
    });
  }
  for (auto& thread : threads) thread.join();
  REQUIRE(timed_out == 3);
  // No registration of those calls is left to be counted down: the gated
  // objects becoming ready now touch only the Get below.
  std::ofstream(gate) << "open";
  REQUIRE(*lumen::Get(fast) == 9);
  auto values = lumen::Get(gated, std::chrono::seconds(30));
  REQUIRE(values.size() == 3);
  REQUIRE(*values[2] == 1);
  auto all = lumen::Wait(gated, 3, std::chrono::seconds(1));
  REQUIRE(all.ready.size() == 3);
}
