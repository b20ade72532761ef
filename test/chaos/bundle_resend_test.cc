// Reliability items 8 and 9 for placement groups: a bundle prepare or commit
// whose reply is lost because the node's link to the head is reset (the node
// acted, or never got the request) is sent again with its key when the node
// registers again (scheduler/placement_group_manager.h), not rolled back; the
// node answers a repeat from its table (core/node/keyed_requests.h). The
// faults come from the node daemon's fault injector (LUMEN_FAULT_INJECT in its
// environment; core/node/head_link.h): it drops its link to the head right
// after acting on the batch (drop_reply), or instead of acting
// (fail_before_send).
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <string>

#include "lumen/common/head_client.h"
#include "lumen/lumen.h"
#include "test/chaos/chaos_support.h"
#include "test/core/test_support.h"
#include "test/head/http_get.h"

namespace {

using lumen::test::MultiNodeCluster;
using lumen::test::WaitUntil;

// A counter from the head's /metrics, or -1.
long HeadCounter(const MultiNodeCluster& cluster, const std::string& name) {
  auto [status, body] = lumen::test::HttpGet("127.0.0.1", cluster.head_metrics_port(), "/metrics");
  if (status != 200) return -1;
  const std::string line = "\n" + name + " ";
  auto at = body.find(line);
  if (at == std::string::npos) return -1;
  return std::atol(body.c_str() + at + line.size());
}

bool FreeCpus(double total, double free) {
  auto usage = lumen::test::chaos::ReadClusterUsage();
  return usage.total_cpus == total && usage.free_cpus == free;
}

// The group's state as the head lists it ("" when not listed).
std::string ListedState(const std::string& head, const std::string& id) {
  auto groups = lumen::runtime::QueryPlacementGroups(head);
  if (!groups.ok()) return "";
  for (const auto& g : *groups) {
    if (g.id == id) return g.state;
  }
  return "";
}

}  // namespace

TEST_CASE("bundle prepare and commit lost with the head link are resent with their keys, "
          "no rollback",
          "[chaos]") {
  // Invariant: a node's link to the head reset while a bundle prepare or
  // commit is unanswered (drop_reply: the node acted and its reply was lost;
  // fail_before_send: the request was lost unread) does not roll the group
  // back: when the node registers again the head sends the same request with
  // the same key, the node answers it (from its table when it had acted), and
  // the group is created with no rollback, its bundles reserved once.
  // The faulty node loses its link on its first prepare and on its first
  // commit. First a group on that node alone: prepared and committed in one
  // request (scheduler/placement_group_manager.h), so its prepare is lost and
  // resent, and no commit reaches the node (1 reset; a commit of its own would
  // have been a second). Then a group over both nodes, through both phases:
  // its commit on the faulty node is lost and resent (1 reset more).
  // Removing a group frees its CPUs. (Before the resends: each reset rolled
  // the attempt back.)
  const std::string mode = GENERATE(std::string("drop_reply"), std::string("fail_before_send"));
  lumen::test::chaos::Seed seed;
  INFO("seed " << seed.value() << ", mode " << mode);
  lumen::test::chaos::LeakCheck leaks;
  {
    MultiNodeCluster cluster({{{{"CPU", 1}}}}, {{"LUMEN_HEAD_RETRY_PERIOD_MS", "100"}});
    const std::string head = cluster.head_address();
    // The only node a bundle of 2 CPUs fits on; its first prepare and its
    // first commit each lose their link.
    MultiNodeCluster::NodeSpec faulty{{{"CPU", 2}}};
    faulty.env = {{"LUMEN_FAULT_INJECT",
                   "prepareBundles:" + mode + ":1:1,commitBundles:" + mode + ":1:1"},
                  {"LUMEN_FAULT_SEED", std::to_string(seed.value())}};
    cluster.AddNode(faulty);
    REQUIRE(WaitUntil([] { return FreeCpus(3, 3); }));

    auto one = lumen::CreatePlacementGroup(
        {.bundles = {{{"CPU", 2}}}, .strategy = lumen::PlacementStrategy::PACK});
    REQUIRE(one.Wait(std::chrono::seconds(20)));
    CHECK(ListedState(head, one.GetID()) == "CREATED");
    CHECK(HeadCounter(cluster, "lumen_head_node_reconnects_total") == 1);
    CHECK(HeadCounter(cluster, "lumen_head_bundle_requests_resent_total") == 1);
    CHECK(HeadCounter(cluster, "lumen_head_placement_group_rollbacks_total") == 0);
    // Reserved once: the node's 2 CPUs are the bundle's, the first node's 1 is free.
    CHECK(WaitUntil([] { return FreeCpus(3, 1); }, std::chrono::seconds(10)));
    INFO("free " << lumen::test::chaos::ReadClusterUsage().free_cpus << " of 3");
    lumen::RemovePlacementGroup(one.GetID());
    REQUIRE(WaitUntil([] { return FreeCpus(3, 3); }, std::chrono::seconds(10)));

    // 2 CPUs fit only the faulty node, and STRICT_SPREAD puts the 1 CPU on the other.
    auto two = lumen::CreatePlacementGroup(
        {.bundles = {{{"CPU", 2}}, {{"CPU", 1}}}, .strategy = lumen::PlacementStrategy::STRICT_SPREAD});
    REQUIRE(two.Wait(std::chrono::seconds(20)));
    CHECK(ListedState(head, two.GetID()) == "CREATED");
    CHECK(HeadCounter(cluster, "lumen_head_node_reconnects_total") == 2);
    CHECK(HeadCounter(cluster, "lumen_head_bundle_requests_resent_total") == 2);
    CHECK(HeadCounter(cluster, "lumen_head_placement_group_rollbacks_total") == 0);
    CHECK(HeadCounter(cluster, "lumen_head_nodes_declared_dead_total") == 0);
    CHECK(WaitUntil([] { return FreeCpus(3, 0); }, std::chrono::seconds(10)));
    INFO("free " << lumen::test::chaos::ReadClusterUsage().free_cpus << " of 3");

    lumen::RemovePlacementGroup(two.GetID());
    CHECK(WaitUntil([] { return FreeCpus(3, 3); }, std::chrono::seconds(10)));
  }
  CHECK(leaks.Leaks("") == "");
}
