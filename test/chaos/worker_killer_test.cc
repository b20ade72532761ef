// Issue 14, matrix item 1: the worker killer. Tasks run while a killer
// SIGKILLs a random busy worker (found through `lumen list tasks`' state rows)
// at a fixed period.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "lumen/common/head_client.h"
#include "lumen/internal/runtime.h"
#include "lumen/lumen.h"
#include "test/chaos/chaos_support.h"
#include "test/core/test_support.h"

namespace {

// The value task `i` must return: every tenth one is large enough (~160 KB)
// to go through the node's shared-memory store, the rest travel inline.
std::vector<int32_t> Expected(int i, int salt) {
  size_t n = i % 10 == 0 ? 40000 : 4;
  std::vector<int32_t> out(n);
  for (size_t k = 0; k < n; ++k) out[k] = static_cast<int32_t>(i * 31 + salt + static_cast<int>(k));
  return out;
}

// ~50 ms of work, then the value; `input` (a ~1 MiB store object) is read so
// that every attempt maps it from the store.
std::vector<int32_t> Step(int i, int salt, std::vector<int32_t> input) {
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  auto out = Expected(i, salt);
  out[0] += input[static_cast<size_t>(i) % input.size()] - 1;  // input holds 1s
  return out;
}

int Env(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::atoi(v) : fallback;
}

}  // namespace

LUMEN_REMOTE(Step);

using lumen::test::ScopedCluster;
using lumen::test::WaitUntil;
using lumen::test::chaos::BusyWorkerPids;
using lumen::test::chaos::ClusterUsage;
using lumen::test::chaos::LeakCheck;
using lumen::test::chaos::ReadClusterUsage;
using lumen::test::chaos::Seed;

TEST_CASE("worker killer: every result is correct and delivered once, resources come back",
          "[chaos]") {
  // Invariant: with max_retries=-1, SIGKILLing a random busy worker every
  // 150 ms while 300 tasks of ~50 ms run loses nothing: every task's result is
  // its own correct value, each task is recorded FINISHED exactly once by its
  // owner (`lumen list tasks`), the pool's workers are all idle and the free
  // CPUs back at the total within 2 s, and the store's bytes back at the
  // baseline once the refs are gone; nothing is left after Shutdown.
  // Scale: issue 14 asks 300 tasks and 100 kills. On 2 CPUs the 300 tasks end
  // after ~40-70 kills, so the 300-task round runs again (new tasks, nothing
  // resubmitted) until 100 kills have been made, the killer going on in each
  // round until all of its results are in; every round is checked as above.
  // LUMEN_CHAOS_TASKS / LUMEN_CHAOS_KILLS change it.
  const int kTasks = Env("LUMEN_CHAOS_TASKS", 300);
  const int kKills = Env("LUMEN_CHAOS_KILLS", 100);
  const auto kPeriod = std::chrono::milliseconds(150);
  Seed seed;
  INFO("seed " << seed.value());
  auto rng = seed.Engine();

  LeakCheck leaks;
  std::string session;
  int kills = 0;
  int rounds = 0;
  {
    ScopedCluster cluster;  // 2 CPUs
    session = cluster.session_dir();
    ClusterUsage baseline = ReadClusterUsage();
    // FINISHED rows of Step tasks seen so far, by task id (every round's).
    std::map<std::string, int> finished;
    while (kills < kKills) {
      REQUIRE(rounds < 10);  // each round makes ~40-70 kills: this is a stuck killer
      const int salt = static_cast<int>((seed.value() + 7919 * static_cast<uint64_t>(rounds)) % 100000);
      INFO("round " << rounds << ", salt " << salt);
      ++rounds;
      {
        auto input = lumen::Put(std::vector<int32_t>(256 * 1024, 1));  // 1 MiB, in the store
        std::vector<lumen::ObjectRef<std::vector<int32_t>>> refs;
        refs.reserve(kTasks);
        for (int i = 0; i < kTasks; ++i) {
          refs.push_back(lumen::Task(Step).SetMaxRetries(-1).Remote(i, salt, input));
        }
        // The killer, on this thread, until every result of the round is in.
        auto next = std::chrono::steady_clock::now() + kPeriod;
        while (!lumen::Wait(refs, refs.size(), std::chrono::milliseconds(0)).unready.empty()) {
          std::this_thread::sleep_until(next);  // the kill period, not a synchronisation
          next += kPeriod;
          std::vector<pid_t> busy = BusyWorkerPids();
          if (busy.empty()) continue;
          pid_t victim = busy[std::uniform_int_distribution<size_t>(0, busy.size() - 1)(rng)];
          if (::kill(victim, SIGKILL) == 0) ++kills;
        }
        std::cout << "worker killer: round " << rounds << ", " << kTasks << " tasks, " << kills
                  << " kills so far, seed " << seed.value() << std::endl;
        auto results = lumen::Get(refs, std::chrono::seconds(120));
        REQUIRE(results.size() == refs.size());
        for (int i = 0; i < kTasks; ++i) {
          INFO("task " << i);
          REQUIRE(*results[i] == Expected(i, salt));
        }
        // Delivered once: the owner recorded each task FINISHED exactly once.
        const size_t before = finished.size();
        std::map<std::string, int> rows_now;
        auto nodes = lumen::runtime::QueryNodes(lumen::internal::ClusterAddress());
        REQUIRE(nodes.ok());
        for (const auto& node : *nodes) {
          auto rows = lumen::runtime::QueryNodeState(node.address, "tasks");
          REQUIRE(rows.ok());
          for (const auto& row : *rows) {
            std::map<std::string, std::string> r(row.begin(), row.end());
            if (r["NAME"] == "Step") {
              CHECK(r["STATE"] == "FINISHED");
              ++rows_now[r["TASK_ID"]];
            }
          }
        }
        finished = rows_now;
        CHECK(finished.size() == before + static_cast<size_t>(kTasks));
        for (const auto& [id, n] : finished) {
          INFO("task " << id);
          CHECK(n == 1);
        }
        // The pool and the CPUs come back within 2 s.
        ClusterUsage now;
        bool settled = WaitUntil(
            [&] {
              now = ReadClusterUsage();
              return now.free_cpus == now.total_cpus && now.active_leases == 0 &&
                     now.idle_workers == now.workers;
            },
            std::chrono::seconds(2));
        INFO("free CPUs " << now.free_cpus << " of " << now.total_cpus << ", workers "
                          << now.workers << " (idle " << now.idle_workers << "), leases "
                          << now.active_leases);
        CHECK(settled);
      }
      // The round's refs are gone: the store holds what it held before.
      ClusterUsage after;
      bool store_back = WaitUntil([&] {
        after = ReadClusterUsage();
        return after.store_used == baseline.store_used;
      });
      INFO("store bytes " << after.store_used << ", baseline " << baseline.store_used);
      CHECK(store_back);
    }
  }
  INFO("kills " << kills << " in " << rounds << " rounds");
  CHECK(kills >= kKills);
  CHECK(leaks.Leaks(session) == "");
}
