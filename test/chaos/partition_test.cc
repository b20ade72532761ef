// Reliability item 7 (doc/reliability.md): a network partition. A head (with
// the driver's node) in this network namespace and three node daemons, each in
// its own Linux network namespace joined to this one by a veth pair on a
// bridge (test/core/netns.h); one node's link is taken down past the death
// timeout, then brought back.
//
// Its own main: exits 77 (SKIPPED in CTest's count) with the reason printed
// where namespaces cannot be made (not root, no `ip netns`). Workers
// re-execute this binary: main hands them to lumen::Init first.
#define CATCH_CONFIG_RUNNER
#include <stdlib.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "lumen/common/address.h"
#include "lumen/common/head_client.h"
#include "lumen/lumen.h"
#include "test/chaos/chaos_support.h"
#include "test/core/netns.h"
#include "test/core/test_support.h"
#include "test/head/http_get.h"

namespace {

using lumen::test::RunCommand;
using lumen::test::WaitUntil;

// Leaves a file "<pid>-<node>" per attempt in `dir`, waits for `gate`, leaves
// "done-<pid>-<node>" and returns where it ran and `i` (so a result names its
// task and its attempt's node).
std::string AnnounceThenAwait(std::string dir, std::string gate, int i) {
  std::string me = std::to_string(::getpid()) + "-" + lumen::GetNodeId();
  std::ofstream(dir + "/" + me).flush();
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!std::filesystem::exists(gate) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // polling a file: no event
  }
  std::ofstream(dir + "/done-" + me).flush();
  return lumen::GetNodeId() + "/" + std::to_string(i);
}

std::string HereNode() { return lumen::GetNodeId(); }

LUMEN_REMOTE(AnnounceThenAwait, HereNode);

// The text after `marker` in `out`, up to the next space or newline.
std::string After(const std::string& out, const std::string& marker) {
  auto at = out.find(marker);
  if (at == std::string::npos) return "";
  at += marker.size();
  return out.substr(at, out.find_first_of(" \n", at) - at);
}

// Files in `dir` whose name starts with `prefix` and contains `node`.
int Count(const std::string& dir, const std::string& prefix, const std::string& node = "") {
  int n = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    std::string name = entry.path().filename().string();
    if (name.rfind(prefix, 0) == 0 && name.find(node) != std::string::npos) ++n;
  }
  return n;
}

// The head's view of `node`: 1 alive, 0 declared dead, -1 not listed.
int Liveness(const std::string& head, const std::string& node) {
  auto nodes = lumen::runtime::QueryNodes(head);
  if (!nodes.ok()) return -1;
  for (const auto& n : *nodes)
    if (n.id.Hex() == node) return n.alive ? 1 : 0;
  return -1;
}

// lumen_head_stale_node_messages_total from the head's /metrics, or -1.
long StaleRefused(const std::string& metrics) {
  auto colon = metrics.rfind(':');
  auto [status, body] = lumen::test::HttpGet(metrics.substr(0, colon), std::stoi(metrics.substr(colon + 1)),
                                             "/metrics");
  if (status != 200) return -1;
  const std::string name = "\nlumen_head_stale_node_messages_total ";
  auto at = body.find(name);
  if (at == std::string::npos) return -1;
  return std::atol(body.c_str() + at + name.size());
}

// One /24 per run (the pid picks it) so concurrent runs do not share a subnet.
std::string Subnet() { return "10.79." + std::to_string(::getpid() % 250 + 1); }

}  // namespace

TEST_CASE("partition: a node cut off past the death timeout is declared dead, its tasks finish "
          "elsewhere once, and its late replies are dropped") {
  // Invariants (reliability item 7): with health checks of 100 ms x 5, a node
  // whose link is down is declared dead within period x threshold + 0.5 s
  // (+1 s of slack for a loaded machine); the retriable tasks running there
  // run again on the other nodes and every result is correct and comes from
  // the attempt on a surviving node (the driver closes its connections to the
  // dead node's workers, so what those workers send back after the link heals
  // is never taken: each task has exactly one FINISHED row and its value names
  // a surviving node); after the heal the head refuses the old incarnation's
  // messages (epoch, counted in /metrics), it never shows alive again and its
  // daemon exits; nothing is left behind.
  lumen::test::chaos::LeakCheck leaks;
  lumen::test::BridgedNamespaces net(3, Subnet());
  INFO(net.error());
  REQUIRE(net.ok());
  ::setenv("LUMEN_HEALTH_CHECK_PERIOD_MS", "100", 1);
  ::setenv("LUMEN_HEALTH_CHECK_FAILURE_THRESHOLD", "5", 1);
  std::string cli = LUMEN_CLI_PATH;
  lumen::test::StopClustersAtExit guard(cli);
  std::string out;
  REQUIRE(RunCommand(cli + " start --head --host " + net.host_ip() +
                         " --num-cpus 1 --object-store-memory 67108864 --metrics-port 0",
                     &out) == 0);
  INFO(out);
  const std::string address = After(out, "head at ");
  std::string metrics = After(out, "metrics:  http://");  // HOST:PORT/metrics
  metrics = metrics.substr(0, metrics.find('/'));
  REQUIRE(!metrics.empty());
  std::string token;
  std::getline(std::ifstream(After(out, "kept in ")), token);
  std::vector<std::string> sessions;
  for (int i = 0; i < 3; ++i) {
    REQUIRE(RunCommand(net.Exec(i, cli + " start --address " + address + " --token " + token +
                                       " --num-cpus 2 --object-store-memory 67108864 "
                                       "--resources '{\"far\": 2}'"),
                       &out) == 0);
    REQUIRE(out.find("listening on " + net.ip(i)) != std::string::npos);
    sessions.push_back(After(out, "session: "));
  }
  lumen::test::Scratch scratch("partition");
  std::filesystem::create_directories(scratch.dir);
  {
    lumen::Config config;
    config.address = address;
    config.token = token;
    lumen::Init(config);
    std::map<int, std::string> node_of;  // namespace index -> node id
    for (const auto& node : lumen::Nodes()) {
      for (int i = 0; i < 3; ++i)
        if (node.address.rfind(net.ip(i) + ":", 0) == 0) node_of[i] = node.id;
    }
    REQUIRE(node_of.size() == 3);
    const std::string victim = node_of[0];

    // Two tasks running on the victim, one on each other node.
    std::vector<lumen::ObjectRef<std::string>> refs;
    for (int i = 0; i < 4; ++i) {
      refs.push_back(lumen::Task(AnnounceThenAwait)
                         .SetResource("far", 1)
                         .SetMaxRetries(3)
                         .SetSchedulingStrategy(lumen::NodeAffinity(node_of[i < 2 ? 0 : i - 1], true))
                         .Remote(scratch.dir, scratch.gate, i));
    }
    REQUIRE(WaitUntil([&] { return Count(scratch.dir, "") == 4; }));
    REQUIRE(Count(scratch.dir, "", victim) == 2);
    REQUIRE(StaleRefused(metrics) == 0);

    const auto cut = std::chrono::steady_clock::now();
    REQUIRE(net.SetLinkUp(0, false));
    REQUIRE(WaitUntil([&] { return Liveness(address, victim) == 0; }, std::chrono::seconds(10)));
    const auto declared = std::chrono::steady_clock::now() - cut;
    INFO("declared dead after "
         << std::chrono::duration_cast<std::chrono::milliseconds>(declared).count() << " ms");
    CHECK(declared <= std::chrono::milliseconds(100 * 5 + 500 + 1000));

    // Its two tasks start again on the other nodes (the victim's workers still
    // run, cut off).
    REQUIRE(WaitUntil([&] { return Count(scratch.dir, "") == 6; }));
    std::ofstream(scratch.gate).flush();
    // Every task ends; the victim's workers too (they finish and reply into
    // the cut link).
    auto results = lumen::Get(refs, std::chrono::seconds(30));
    REQUIRE(WaitUntil([&] { return Count(scratch.dir, "done-", victim) == 2; }));

    // Heal: the victim's stale traffic reaches the head and the driver now.
    REQUIRE(net.SetLinkUp(0, true));
    REQUIRE(WaitUntil([&] { return lumen::test::ProcessesMentioning(sessions[0]).empty(); },
                      std::chrono::seconds(20)));
    REQUIRE(WaitUntil([&] { return StaleRefused(metrics) >= 1; }));
    CHECK(Liveness(address, victim) == 0);

    // Results correct, each from a surviving node, and still so after the heal.
    for (int i = 0; i < 4; ++i) {
      INFO("task " << i);
      const std::string& value = *results[i];
      REQUIRE(value.substr(value.find('/') + 1) == std::to_string(i));
      REQUIRE(value.substr(0, value.find('/')) != victim);
      REQUIRE(*lumen::Get(refs[i]) == value);
    }
    // Delivered once: the driver recorded each task FINISHED exactly once.
    std::map<std::string, int> finished;
    auto nodes = lumen::runtime::QueryNodes(address);
    REQUIRE(nodes.ok());
    for (const auto& node : *nodes) {
      if (!node.alive) continue;
      auto rows = lumen::runtime::QueryNodeState(node.address, "tasks");
      REQUIRE(rows.ok());
      for (const auto& row : *rows) {
        std::map<std::string, std::string> r(row.begin(), row.end());
        if (r["NAME"] == "AnnounceThenAwait" && r["STATE"] == "FINISHED") ++finished[r["TASK_ID"]];
      }
    }
    CHECK(finished.size() == 4);
    for (const auto& [id, n] : finished) {
      INFO("task " << id);
      CHECK(n == 1);
    }
    // The cluster still works across the healed bridge (the other nodes).
    REQUIRE(lumen::Get(lumen::Task(HereNode).SetResource("far", 1).Remote()) != nullptr);
    lumen::Shutdown();
  }
  REQUIRE(RunCommand(cli + " stop", &out) == 0);
  CHECK(leaks.Leaks("") == "");
}

int main(int argc, char** argv) {
  if (const char* role = std::getenv("LUMEN_ROLE"); role && *role) lumen::Init(argc, argv);
  {
    lumen::test::BridgedNamespaces probe(3, Subnet());
    if (!probe.ok()) {
      std::printf("SKIPPED: network namespaces are not available here (needs root and ip netns): %s\n",
                  probe.error().c_str());
      return 77;
    }
  }
  // This run's own TMPDIR: session directories and `lumen stop` see only its
  // clusters, also when other tests run at the same time.
  const char* tmp = std::getenv("TMPDIR");
  std::string dir = std::string(tmp && *tmp ? tmp : "/tmp") + "/lumen-t-XXXXXX";
  if (::mkdtemp(dir.data()) == nullptr) return 1;
  ::setenv("TMPDIR", dir.c_str(), 1);
  int failed = Catch::Session().run(argc, argv);
  std::error_code ec;
  if (!std::filesystem::remove(dir, ec)) std::fprintf(stderr, "left behind: %s\n", dir.c_str());
  return failed == 0 ? 0 : 1;
}
