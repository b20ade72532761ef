// Reliability items 8 and 9 for placement groups: a bundle cancel the head
// wrote into a node's link that then died (through a FaultProxy that loses
// what the head sends, then resets the link) reaches the node when it
// registers again (scheduler/bundle_cancels.h), keyed so that a node that did
// act answers the resend without acting twice (core/node/keyed_requests.h).
#include <catch2/catch.hpp>
#include <chrono>
#include <string>

#include "lumen/common/head_client.h"
#include "lumen/lumen.h"
#include "test/chaos/chaos_support.h"
#include "test/chaos/fault_proxy.h"
#include "test/core/test_support.h"

namespace {

using lumen::test::MultiNodeCluster;
using lumen::test::WaitUntil;
using lumen::test::chaos::FaultProxy;

bool AllCpusFree(double total) {
  auto usage = lumen::test::chaos::ReadClusterUsage();
  return usage.total_cpus == total && usage.free_cpus == total;
}

// The group's state as the head lists it ("" when not listed).
std::string GroupState(const std::string& head, const std::string& id) {
  auto groups = lumen::runtime::QueryPlacementGroups(head);
  if (!groups.ok()) return "";
  for (const auto& g : *groups) {
    if (g.id == id) return g.state;
  }
  return "";
}

}  // namespace

TEST_CASE("a bundle cancel lost with a node's head link is sent again when the node registers "
          "again",
          "[chaos]") {
  // Invariant: a rolled-back placement group releases its bundle on every
  // node, also on one whose link to the head died with the cancel in it
  // (written by the head, never read by the node): the head keeps each
  // cancel until the node acknowledges it and sends it again when the node
  // registers again, so the node's CPUs are all free again. (Before, the
  // cancel was lost: a group still known, not removed, is not in the view's
  // removed groups, so nothing else released the bundle's 2 CPUs.)
  lumen::test::chaos::Seed seed;
  INFO("seed " << seed.value());
  lumen::test::chaos::LeakCheck leaks;
  {
    MultiNodeCluster cluster({{{{"CPU", 1}}}}, {{"LUMEN_HEAD_RETRY_PERIOD_MS", "100"}});
    const std::string head = cluster.head_address();
    FaultProxy proxy({.target = head,
                      .max_delay = std::chrono::milliseconds(0),
                      .reset_probability = 0,
                      .split_writes = false,
                      .seed = seed.value()});
    MultiNodeCluster::NodeSpec proxied{{{"CPU", 2}}};
    proxied.head_address = proxy.address();
    cluster.AddNode(proxied);
    const size_t other = cluster.AddNode({{{"CPU", 2}}});
    REQUIRE(WaitUntil([] { return AllCpusFree(5); }));
    // Two bundles of 2 CPUs on distinct nodes: the proxied node and the other.
    auto pg = lumen::CreatePlacementGroup(
        {.bundles = {{{"CPU", 2}}, {{"CPU", 2}}},
         .strategy = lumen::PlacementStrategy::STRICT_SPREAD});
    REQUIRE(pg.Wait(std::chrono::seconds(20)));
    REQUIRE(WaitUntil([] { return lumen::test::chaos::ReadClusterUsage().free_cpus == 1; }));

    const uint64_t connections = proxy.connections();
    proxy.set_drop_from_target(true);  // what the head writes to the proxied node is lost
    cluster.KillNode(other);           // the group rolls back: a cancel to the proxied node
    REQUIRE(WaitUntil([&] {
      std::string state = GroupState(head, pg.GetID());
      return !state.empty() && state != "CREATED";  // rolled back: the cancel was written
    }));
    proxy.ResetAll();  // the link dies with it (unread bytes go too)
    proxy.set_drop_from_target(false);
    REQUIRE(proxy.resets() >= 1);
    REQUIRE(WaitUntil([&] { return proxy.connections() > connections; },
                      std::chrono::seconds(10)));  // the node registers again
    // The group cannot be placed again (one node of 2 CPUs left): nothing
    // reserves those CPUs anew.
    CHECK(WaitUntil([] { return AllCpusFree(3); }, std::chrono::seconds(10)));
    INFO("free " << lumen::test::chaos::ReadClusterUsage().free_cpus << " of 3");
    CHECK(AllCpusFree(3));
  }
  CHECK(leaks.Leaks("") == "");
}
