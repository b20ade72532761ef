// MemoryMonitor's decisions with scripted samples: which worker dies when the
// node's workers go over budget, that it dies once, that lease grants pause
// with a doubling backoff and resume. No processes; the kill is recorded.
#include "core/node/memory_monitor.h"

#include <unistd.h>

#include <boost/asio.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <string>
#include <vector>

namespace lumen::node {
namespace {

using namespace std::chrono_literals;
constexpr uint64_t kMiB = 1 << 20;

WorkerMemory W(pid_t pid, uint64_t mib, bool leased, uint64_t lease_id, bool retriable) {
  return WorkerMemory{WorkerId::Random(), pid, mib * kMiB, leased, lease_id, retriable};
}

// A monitor over a scripted sample, recording kills and pauses.
struct Rig {
  explicit Rig(MemoryMonitorOptions options)
      : monitor(io, options,
                {.sample = [this] { return sample; },
                 .kill =
                     [this](const WorkerMemory& w, const std::string& why) {
                       killed.push_back(w.pid);
                       reasons.push_back(why);
                     },
                 .pause_grants = [this](bool p) { pauses.push_back(p); }}) {}
  boost::asio::io_context io;
  std::vector<WorkerMemory> sample;
  std::vector<pid_t> killed;
  std::vector<std::string> reasons;
  std::vector<bool> pauses;
  MemoryMonitor monitor;
};

TEST_CASE("The victim is the newest retriable lease, else the newest lease, never an idle worker") {
  // Invariant: ChooseVictim prefers retriable over non-retriable work, and
  // among equals the newest lease (largest id); idle workers are never chosen.
  std::vector<WorkerMemory> w{W(10, 500, false, 0, false),  // idle, the biggest
                              W(11, 100, true, 3, true),   W(12, 100, true, 7, true),
                              W(13, 100, true, 9, false),  W(14, 100, true, 5, true)};
  REQUIRE(MemoryMonitor::ChooseVictim(w) == 2u);  // lease 7: newest retriable
  w[2].retriable = false;                          // now 14 (lease 5) is the newest retriable
  REQUIRE(MemoryMonitor::ChooseVictim(w) == 4u);
  for (auto& x : w) x.retriable = false;
  REQUIRE(MemoryMonitor::ChooseVictim(w) == 3u);  // lease 9: newest of all
  for (auto& x : w) x.leased = false;
  REQUIRE_FALSE(MemoryMonitor::ChooseVictim(w).has_value());
  REQUIRE_FALSE(MemoryMonitor::ChooseVictim({}).has_value());
}

TEST_CASE("Over budget one worker is killed, once, and grants pause with a doubling backoff") {
  // Invariants: nothing is killed at or under the budget; over it exactly one
  // victim per round, named with the budget and the usage in its reason; a
  // victim still listed (not reaped) is neither counted nor killed again;
  // each kill pauses grants, and the pause doubles for a kill in a row and
  // ends on its own (grants resume).
  Rig rig({.budget_bytes = 300 * kMiB, .refresh_period = 1000ms, .backoff = 1ms,
           .max_backoff = 10000ms});
  rig.sample = {W(20, 100, false, 0, false), W(21, 100, true, 1, true),
                W(22, 100, true, 2, false)};
  REQUIRE_FALSE(rig.monitor.Check().has_value());  // exactly at budget
  rig.sample.push_back(W(23, 50, true, 3, true));
  auto victim = rig.monitor.Check();
  REQUIRE(victim.has_value());
  CHECK(victim->pid == 23);  // newest retriable
  REQUIRE(rig.killed == std::vector<pid_t>{23});
  CHECK(rig.reasons[0].rfind(kMemoryMonitorKillTag, 0) == 0);
  CHECK(rig.reasons[0].find("350 MiB") != std::string::npos);
  CHECK(rig.reasons[0].find("budget of 300 MiB") != std::string::npos);
  CHECK(rig.pauses == std::vector<bool>{true});
  CHECK(rig.monitor.grants_paused());
  CHECK(rig.monitor.next_backoff() == 2ms);  // doubled for a kill in a row
  // The victim is not reaped yet: without it the rest is within budget.
  REQUIRE_FALSE(rig.monitor.Check().has_value());
  CHECK(rig.killed.size() == 1);
  // The pause ends by itself (its timer fires; run_one waits for it).
  rig.io.run_one_for(std::chrono::seconds(5));
  CHECK(rig.pauses == std::vector<bool>{true, false});
  CHECK_FALSE(rig.monitor.grants_paused());
  // Still over budget without it: the next victim is the newest retriable
  // left (21), then the non-retriable one (22).
  rig.sample.push_back(W(24, 250, false, 0, false));
  REQUIRE(rig.monitor.Check()->pid == 21);
  REQUIRE(rig.monitor.Check()->pid == 22);
  CHECK(rig.killed == std::vector<pid_t>{23, 21, 22});
  CHECK(rig.monitor.kills() == 3);
  // Only idle workers left: over budget, but there is nothing to kill.
  REQUIRE_FALSE(rig.monitor.Check().has_value());
}

TEST_CASE("No budget, no monitor") {
  // Invariant: with budget 0 nothing is sampled or killed.
  Rig rig({.budget_bytes = 0});
  rig.sample = {W(30, 100000, true, 1, true)};
  REQUIRE_FALSE(rig.monitor.Check().has_value());
  CHECK(rig.killed.empty());
}

TEST_CASE("ReadAnonRss reads this process's anonymous resident memory") {
  // Invariant: a live process has some RssAnon; a pid that does not exist has 0.
  CHECK(MemoryMonitor::ReadAnonRss(::getpid()) > 0);
  CHECK(MemoryMonitor::ReadAnonRss(0x7ffffff0) == 0);
}

}  // namespace
}  // namespace lumen::node
