// Issue 14, matrix item 6: the head restarts. The head is SIGKILLed while a
// driver runs 200 tasks on two nodes; a new head on the same port reads the
// old one's write-ahead log; the nodes and the driver reconnect; every table
// (nodes, jobs, named and detached actors, placement groups, key-value store)
// is back. With persistence off, losing the head stops the nodes and fails
// the driver's head calls with an error saying so, and nothing hangs.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "lumen/common/head_client.h"
#include "lumen/lumen.h"
#include "test/chaos/chaos_support.h"
#include "test/chaos/fault_proxy.h"
#include "test/core/test_support.h"

namespace {

using lumen::test::MultiNodeCluster;
using lumen::test::WaitUntil;

// ~20 ms of work, and a result that depends on the argument.
int64_t SlowSquare(int64_t x) {
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  return x * x;
}

class Keeper {
 public:
  explicit Keeper(int64_t start) : n_(start) {}
  static Keeper* Create(int64_t start) { return new Keeper(start); }
  int64_t Add(int64_t x) { return n_ += x; }

 private:
  int64_t n_;
};

MultiNodeCluster::NodeSpec Cpus(double n) { return {{{"CPU", n}}}; }

// The alive nodes' ids as the head lists them, or empty when it does not answer.
std::set<std::string> AliveNodes(const std::string& head) {
  std::set<std::string> ids;
  auto nodes = lumen::runtime::QueryNodes(head);
  if (!nodes.ok()) return ids;
  for (const auto& n : *nodes) {
    if (n.alive) ids.insert(n.id.Hex());
  }
  return ids;
}

}  // namespace

LUMEN_REMOTE(SlowSquare, Keeper::Create, &Keeper::Add);

TEST_CASE("head restart: killed during 200 tasks, the new head serves every table from its log",
          "[chaos]") {
  // Invariant: after a kill -9 of the head and a new head on the same port
  // over the same session's log, (1) each of the 200 tasks submitted around
  // the kill returns its own result, (2) both nodes are alive again under
  // their old ids (no new node), (3) the named detached actor is found by
  // name and keeps its state, (4) the placement group is CREATED on the same
  // nodes, (5) the key-value entries are there and a deleted one is not, and
  // (6) head calls made while the head was down wait for it and succeed.
  lumen::test::chaos::LeakCheck leaks;
  {
    MultiNodeCluster cluster({Cpus(2), Cpus(2)}, {{"LUMEN_HEAD_RETRY_PERIOD_MS", "100"},
                                                  {"LUMEN_HEAD_RECONNECT_TIMEOUT_MS", "30000"}});
    const std::string head = cluster.head_address();
    const std::set<std::string> nodes_before = {cluster.node_id(0), cluster.node_id(1)};
    REQUIRE(AliveNodes(head) == nodes_before);

    REQUIRE(lumen::kv::Put("rendezvous", "10.0.0.5:7000", "restart-test"));
    REQUIRE(lumen::kv::Put("gone", "x", "restart-test"));
    REQUIRE(lumen::kv::Delete("gone", "restart-test"));
    auto keeper = lumen::Actor(Keeper::Create)
                      .SetName("keeper")
                      .SetLifetime(lumen::ActorLifetime::kDetached)
                      .Remote(100);
    REQUIRE(*lumen::Get(keeper.Task(&Keeper::Add).Remote(1)) == 101);
    auto pg = lumen::CreatePlacementGroup({.name = "kept",
                                           .bundles = {{{"CPU", 0.5}}, {{"CPU", 0.5}}},
                                           .strategy = lumen::PlacementStrategy::STRICT_SPREAD});
    REQUIRE(pg.Wait(std::chrono::seconds(20)));
    const auto pg_nodes = pg.Info().bundle_nodes;

    // 200 tasks, submitted in waves from this thread while another kills the
    // head after the first 50 results and starts a new one.
    std::vector<lumen::ObjectRef<int64_t>> refs;
    std::atomic<int> done{0};
    std::atomic<bool> restarted{false};
    std::thread killer([&] {
      WaitUntil([&] { return done.load() >= 50; }, std::chrono::seconds(60));
      cluster.KillHead();
      // A head call while the head is down waits for it (item 6 of the invariant).
      std::thread late_put([] { lumen::kv::Put("during", "outage", "restart-test"); });
      std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the outage itself
      cluster.StartHeadAgain(/*from_state=*/true);
      restarted = true;
      late_put.join();
    });
    // Joined on every way out: a Get that throws must fail the test with its
    // message, not abort it (a joinable std::thread's destructor terminates).
    struct JoinOnExit {
      std::thread& thread;
      ~JoinOnExit() {
        if (thread.joinable()) thread.join();
      }
    } join_killer{killer};
    std::map<size_t, int64_t> results;
    for (int64_t i = 0; i < 200; ++i) {
      refs.push_back(lumen::Task(SlowSquare).SetMaxRetries(-1).Remote(i));
      if (refs.size() % 25 == 0) {
        for (size_t j = refs.size() - 25; j < refs.size(); ++j) {
          results[j] = *lumen::Get(refs[j], std::chrono::seconds(60));
          ++done;
        }
      }
    }
    killer.join();
    REQUIRE(restarted);
    for (int64_t i = 0; i < 200; ++i) REQUIRE(results.at(i) == i * i);

    // The nodes registered again, under their own ids.
    REQUIRE(WaitUntil([&] { return AliveNodes(head) == nodes_before; }, std::chrono::seconds(20)));
    auto listed = lumen::runtime::QueryNodes(head);
    REQUIRE(listed.ok());
    CHECK(listed->size() == 2);

    // Key-value store.
    CHECK(lumen::kv::Get("rendezvous", "restart-test") ==
          std::optional<std::string>("10.0.0.5:7000"));
    CHECK(lumen::kv::Get("gone", "restart-test") == std::nullopt);
    CHECK(lumen::kv::Get("during", "restart-test") == std::optional<std::string>("outage"));
    // Named detached actor: found by name, same process, same state.
    auto again = lumen::GetActor<Keeper>("keeper");
    CHECK(*lumen::Get(again.Task(&Keeper::Add).Remote(1), std::chrono::seconds(20)) == 102);
    // Placement group: still created, on the same nodes.
    auto info = pg.Info();
    CHECK(info.state == "CREATED");
    CHECK(info.bundle_nodes == pg_nodes);
    // The restarted head takes new entries too.
    REQUIRE(lumen::kv::Put("after", "restart", "restart-test"));
    CHECK(lumen::kv::Get("after", "restart-test") == std::optional<std::string>("restart"));
    again.Kill();
  }
  CHECK(leaks.Leaks("") == "");
}

TEST_CASE("head lost with persistence off: nodes stop and head calls fail with a clear error",
          "[chaos]") {
  // Invariant: with --head-persistence none, a SIGKILLed head is not waited
  // for: each node daemon exits within a few seconds (its log names the lost
  // head and the persistence), and a driver's head call fails within seconds
  // with an error that says persistence is off; nothing hangs.
  lumen::test::chaos::LeakCheck leaks;
  {
    MultiNodeCluster cluster({Cpus(2), Cpus(2)}, {{"LUMEN_HEAD_PERSISTENCE", "none"},
                                                  {"LUMEN_HEAD_RETRY_PERIOD_MS", "100"},
                                                  {"LUMEN_HEAD_RECONNECT_TIMEOUT_MS", "30000"}});
    REQUIRE(*lumen::Get(lumen::Task(SlowSquare).Remote(7), std::chrono::seconds(20)) == 49);
    REQUIRE(lumen::runtime::GetHeadReconnect().head_persistent == false);
    const pid_t d0 = cluster.daemon_pid(0), d1 = cluster.daemon_pid(1);
    cluster.KillHead();
    const auto killed = std::chrono::steady_clock::now();
    CHECK(WaitUntil(
        [&] { return lumen::test::chaos::ProcessGone(d0) && lumen::test::chaos::ProcessGone(d1); },
        std::chrono::seconds(10)));
    std::string error;
    try {
      lumen::kv::Put("k", "v", "persistence-off");
    } catch (const std::exception& e) {
      error = e.what();
    }
    CHECK(std::chrono::steady_clock::now() - killed < std::chrono::seconds(10));
    INFO(error);
    CHECK(error.find("persistence is off") != std::string::npos);
  }
  CHECK(leaks.Leaks("") == "");
}

TEST_CASE("persistence off: a node whose head link resets comes back as itself, and a restarted head "
          "that does not know it stops it",
          "[chaos]") {
  // Invariant (items 6 and 8): with --head-persistence none, a reset of a
  // node's head link (through a FaultProxy) does not stop the node: it
  // reconnects within the head's health-check grace and goes on under its id
  // (its daemon runs, the head lists it alive, a task pinned to it runs).
  // When the head is then replaced by a new one at the same address (no
  // tables), the node asks to rejoin, is not known, and exits; nothing hangs.
  lumen::test::chaos::LeakCheck leaks;
  {
    MultiNodeCluster cluster({Cpus(2)}, {{"LUMEN_HEAD_PERSISTENCE", "none"},
                                         {"LUMEN_HEAD_RETRY_PERIOD_MS", "100"},
                                         {"LUMEN_HEAD_RECONNECT_TIMEOUT_MS", "30000"}});
    lumen::test::chaos::FaultProxy proxy({.target = cluster.head_address(),
                                          .max_delay = std::chrono::milliseconds(0),
                                          .reset_probability = 0,
                                          .split_writes = false});
    MultiNodeCluster::NodeSpec spec = Cpus(2);
    spec.head_address = proxy.address();
    const size_t n = cluster.AddNode(spec);
    const std::string id = cluster.node_id(n);
    const pid_t daemon = cluster.daemon_pid(n);
    const auto on_it = lumen::NodeAffinity(id, /*soft=*/false);
    // The head lists the new node before the first node's view has it (views
    // learn of nodes by broadcast), and a hard affinity to a node the view
    // does not know fails at once: retry until the view knows it.
    REQUIRE(WaitUntil([&] {
      try {
        return *lumen::Get(lumen::Task(SlowSquare).SetSchedulingStrategy(on_it).Remote(3),
                           std::chrono::seconds(20)) == 9;
      } catch (const std::exception& error) {
        if (std::string(error.what()).find("is unknown") == std::string::npos) throw;
        return false;
      }
    }));
    const uint64_t before = proxy.connections();
    proxy.ResetAll();
    REQUIRE(proxy.resets() >= 1);
    REQUIRE(WaitUntil([&] { return proxy.connections() > before; }, std::chrono::seconds(10)));
    REQUIRE(WaitUntil([&] { return AliveNodes(cluster.head_address()).contains(id); }));
    CHECK_FALSE(lumen::test::chaos::ProcessGone(daemon));
    CHECK(*lumen::Get(lumen::Task(SlowSquare).SetSchedulingStrategy(on_it).Remote(4),
                      std::chrono::seconds(20)) == 16);
    CHECK_FALSE(lumen::test::chaos::ProcessGone(daemon));

    cluster.RestartHead(/*from_state=*/false);
    CHECK(WaitUntil([&] { return lumen::test::chaos::ProcessGone(daemon); },
                    std::chrono::seconds(10)));
  }
  CHECK(leaks.Leaks("") == "");
}
