// Issue 14, matrix item 18: the chaos soak, scaled to run in well under 90 s
// on 2 loaded cores. A head and three nodes on loopback; nested tasks and a
// sequenced actor run while a worker killer SIGKILLs a random busy worker
// every second and one node daemon is SIGKILLed a third of the way through,
// with the driver's and the two other nodes' links to the head behind fault
// proxies (test/chaos/fault_proxy.h: 0-80 ms per chunk, split writes, 1 %
// resets). Run time ~20 s; the invariant is stated in the test case.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "lumen/common/head_client.h"
#include "lumen/internal/runtime.h"
#include "lumen/lumen.h"
#include "test/chaos/chaos_support.h"
#include "test/chaos/fault_proxy.h"
#include "test/core/test_support.h"

namespace {

using lumen::test::chaos::AppendLine;
using lumen::test::chaos::ReadLines;

int64_t Leaf(int64_t i, int64_t k) {
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  return i * 100 + k;
}

// Submits four leaves and sums them: a task that waits on tasks of its own.
int64_t Nested(int64_t i) {
  std::vector<lumen::ObjectRef<int64_t>> parts;
  for (int64_t k = 0; k < 4; ++k) parts.push_back(lumen::Task(Leaf).SetMaxRetries(-1).Remote(i, k));
  int64_t sum = 0;
  for (const auto& v : lumen::Get(parts)) sum += *v;
  return sum;
}

class Recorder {
 public:
  explicit Recorder(std::string log) : log_(std::move(log)) {}
  static Recorder* Create(std::string log) { return new Recorder(std::move(log)); }
  int64_t Record(int64_t sequence) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    AppendLine(log_, std::to_string(::getpid()) + " " + std::to_string(sequence));
    return sequence;
  }

 private:
  std::string log_;
};

// A process's proportional set size in bytes (shared pages, such as the
// store's, divided among the processes mapping them); 0 when it is gone.
uint64_t PssBytes(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/smaps_rollup");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("Pss:", 0) == 0) return std::stoull(line.substr(4)) * 1024;
  }
  return 0;
}

// The memory this process and its descendants hold together (sum of PSS:
// shared pages counted once), in bytes.
uint64_t TreeMemory() {
  uint64_t total = PssBytes(::getpid());
  std::vector<pid_t> frontier = {::getpid()};
  std::set<pid_t> seen;
  while (!frontier.empty()) {
    pid_t p = frontier.back();
    frontier.pop_back();
    for (pid_t child : lumen::test::ChildPids(p)) {
      if (!seen.insert(child).second) continue;
      total += PssBytes(child);
      frontier.push_back(child);
    }
  }
  return total;
}

// Lines of the files under `dir` that show a crash or a sanitizer report.
std::vector<std::string> CrashLines(const std::string& dir) {
  static const char* kMarkers[] = {"AddressSanitizer", "UndefinedBehaviorSanitizer",
                                   "runtime error:",   "LeakSanitizer",
                                   "terminate called", "Segmentation fault"};
  std::vector<std::string> out;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(dir, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    if (!it->is_regular_file(ec)) continue;
    std::ifstream in(it->path());
    std::string line;
    while (std::getline(in, line)) {
      for (const char* marker : kMarkers) {
        if (line.find(marker) != std::string::npos) {
          out.push_back(it->path().string() + ": " + line);
          break;
        }
      }
    }
  }
  return out;
}

}  // namespace

LUMEN_REMOTE(Leaf, Nested, Recorder::Create, &Recorder::Record);

using lumen::test::MultiNodeCluster;
using lumen::test::WaitUntil;
using lumen::test::chaos::BusyWorkerPids;
using lumen::test::chaos::LeakCheck;
using lumen::test::chaos::ReadClusterUsage;
using lumen::test::chaos::ScratchDir;
using lumen::test::chaos::Seed;

TEST_CASE("chaos soak: nested tasks and an actor survive a worker killer and a node death",
          "[chaos]") {
  // Invariant: while a random busy worker is SIGKILLed every second and one of
  // three nodes is SIGKILLed, and the links to the head from the driver and
  // the two other nodes (and so their workers) delay each chunk 0-80 ms and
  // reset 1 % of them, every nested task returns its correct sum
  // (max_retries=-1), the actor (max_restarts=-1, max_task_retries=-1) returns
  // every sequence number and each incarnation receives them in order; at the
  // end the alive nodes' free CPUs equal their total (only the actor's lease
  // is left), the cluster's processes never held more than 2 GiB together
  // (sum of PSS), and no log shows a crash or a sanitizer report; nothing is
  // left after Shutdown.
  // Scale: ~20-30 s on 2 loaded cores (issue 14 asks for a soak; 90 s at most here).
  constexpr int kNested = 200;
  constexpr int kCalls = 1500;
  Seed seed;
  INFO("seed " << seed.value());
  auto rng = seed.Engine();
  LeakCheck leaks;
  ScratchDir scratch("lumen-soak");
  std::string log = scratch.path() + "/calls";
  uint64_t peak_rss = 0;  // bytes, sum of PSS
  int kills = 0;
  std::vector<std::string> session_dirs;
  {
    MultiNodeCluster::NodeSpec spec;
    spec.resources = {{"CPU", 2}};
    spec.store_bytes = 128ull << 20;
    // Deaths come from the SIGKILLs (noticed at once through the sockets), not
    // from health checks missed on a loaded machine: 100 ms x 30.
    // The proxies outlive the cluster (its shutdown still talks through them).
    using lumen::test::chaos::FaultProxy;
    std::optional<FaultProxy> proxies[3];
    MultiNodeCluster cluster({spec}, {{"LUMEN_HEALTH_CHECK_FAILURE_THRESHOLD", "30"}});
    // The other nodes reach the head through lossy links (item 8): delayed,
    // split, sometimes reset (a node then registers again as itself).
    for (uint64_t i = 0; i < 3; ++i) {
      proxies[i].emplace(FaultProxy::Options{.target = cluster.head_address(),
                                             .seed = seed.value() + 1 + i});
    }
    FaultProxy& link1 = *proxies[0];
    FaultProxy& link2 = *proxies[1];
    FaultProxy& driver_link = *proxies[2];
    MultiNodeCluster::NodeSpec via1 = spec, via2 = spec;
    via1.head_address = link1.address();
    via2.head_address = link2.address();
    REQUIRE(cluster.AddNode(via1) == 1);
    REQUIRE(cluster.AddNode(via2) == 2);
    // This driver, too (it attaches to the node started with the head).
    lumen::Shutdown();
    {
      lumen::Config config;
      config.address = driver_link.address();
      lumen::Init(config);
    }
    auto nodes = lumen::runtime::QueryNodes(cluster.head_address());
    REQUIRE(nodes.ok());
    for (const auto& n : *nodes) session_dirs.push_back(n.session_dir);

    // The actor lives on the first node (the driver's), which is never killed.
    auto actor = lumen::Actor(Recorder::Create)
                     .SetMaxRestarts(-1)
                     .SetMaxTaskRetries(-1)
                     .SetSchedulingStrategy(lumen::NodeAffinity(cluster.node_id(0), false))
                     .Remote(log);
    // Nested tasks go in waves, one per killer tick, so that they span the soak.
    std::vector<lumen::ObjectRef<int64_t>> nested;
    auto submit_wave = [&] {
      for (int n = 0; n < 10 && static_cast<int>(nested.size()) < kNested; ++n) {
        nested.push_back(
            lumen::Task(Nested).SetMaxRetries(-1).Remote(static_cast<int64_t>(nested.size())));
      }
    };
    submit_wave();
    std::vector<lumen::ObjectRef<int64_t>> calls;
    for (int64_t s = 1; s <= kCalls; ++s) calls.push_back(actor.Task(&Recorder::Record).Remote(s));

    auto start = std::chrono::steady_clock::now();
    auto next = start + std::chrono::seconds(1);
    bool node_killed = false;
    int tick = 0;
    auto all_ready = [&] {
      return static_cast<int>(nested.size()) == kNested &&
             lumen::Wait(nested, nested.size(), std::chrono::milliseconds(0)).unready.empty() &&
             lumen::Wait(calls, calls.size(), std::chrono::milliseconds(0)).unready.empty();
    };
    while (!all_ready()) {
      REQUIRE(std::chrono::steady_clock::now() - start < std::chrono::seconds(75));
      peak_rss = std::max(peak_rss, TreeMemory());
      std::this_thread::sleep_until(next);  // the killer's period, not a synchronisation
      next += std::chrono::seconds(1);
      ++tick;
      submit_wave();
      if (!node_killed && ReadLines(log).size() >= kCalls / 3) {
        cluster.KillNode(2);
        node_killed = true;
        continue;
      }
      std::vector<pid_t> busy = BusyWorkerPids();
      auto recorded = ReadLines(log);
      if (tick % 5 == 0 && !recorded.empty()) {
        // Every fifth kill is the actor's current process.
        busy = {static_cast<pid_t>(std::stol(recorded.back()))};
      }
      if (busy.empty()) continue;
      pid_t victim = busy[std::uniform_int_distribution<size_t>(0, busy.size() - 1)(rng)];
      if (::kill(victim, SIGKILL) == 0) ++kills;
    }
    std::cout << "chaos soak: " << kills << " worker kills, node killed " << node_killed
              << ", peak memory (PSS) " << (peak_rss >> 20) << " MiB; proxies: chunks "
              << link1.chunks() << "/" << link2.chunks() << "/" << driver_link.chunks()
              << ", resets " << link1.resets() << "/" << link2.resets() << "/"
              << driver_link.resets() << "; seed " << seed.value() << std::endl;
    CHECK(link1.chunks() > 0);
    CHECK(driver_link.chunks() > 0);
    CHECK(node_killed);

    auto sums = lumen::Get(nested, std::chrono::seconds(60));
    for (int64_t i = 0; i < kNested; ++i) {
      INFO("nested " << i);
      CHECK(*sums[i] == 4 * i * 100 + 6);
    }
    auto answers = lumen::Get(calls, std::chrono::seconds(60));
    for (int64_t s = 1; s <= kCalls; ++s) REQUIRE(*answers[s - 1] == s);
    // In order per incarnation, nothing skipped (as in the actor killer test).
    int64_t last = 0;
    pid_t pid = 0;
    std::set<int64_t> received;
    for (const auto& line : ReadLines(log)) {
      std::istringstream in(line);
      pid_t p = 0;
      int64_t s = 0;
      in >> p >> s;
      INFO("pid " << p << " sequence " << s << " after " << last);
      if (p != pid) {
        REQUIRE(s <= last + 1);
        pid = p;
      } else {
        REQUIRE(s == last + 1);
      }
      last = s;
      received.insert(s);
    }
    CHECK(received.size() == static_cast<size_t>(kCalls));

    // Resources balance on the nodes still alive.
    lumen::test::chaos::ClusterUsage usage;
    bool balanced = WaitUntil(
        [&] {
          usage = ReadClusterUsage();
          // One lease stays: the actor's.
          return usage.free_cpus == usage.total_cpus && usage.active_leases == 1;
        },
        std::chrono::seconds(5));
    INFO("free CPUs " << usage.free_cpus << " of " << usage.total_cpus << ", leases "
                      << usage.active_leases);
    CHECK(balanced);
    CHECK(usage.total_cpus == 4);  // the killed node is gone from the view
    CHECK(peak_rss < (2ull << 30));
    for (const auto& dir : session_dirs) {
      INFO("session " << dir);
      CHECK(CrashLines(dir).empty());
    }
  }
  for (const auto& dir : session_dirs) CHECK(leaks.Leaks(dir) == "");
}
