// Reliability items 8 and 9 for placement groups: a bundle cancel the head
// wrote into a node's link that then died (through a FaultProxy that loses
// what the head sends, then resets the link) reaches the node when it
// registers again (scheduler/bundle_cancels.h), keyed so that a node that did
// act answers the resend without acting twice (core/node/keyed_requests.h).
#include <catch2/catch.hpp>
#include <chrono>
#include <string>

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

}  // namespace

TEST_CASE("a bundle cancel lost with a node's head link is sent again when the node registers "
          "again",
          "[chaos]") {
  // Invariant: removing a placement group releases its bundles on every node,
  // also on one whose link to the head died with the cancel in it (written by
  // the head, never read by the node): the head keeps each cancel until the
  // node acknowledges it and sends it again when the node registers again,
  // so the node's CPUs are all free again. (Before: the cancel was lost and
  // the node kept the bundle's 2 CPUs reserved for good.)
  lumen::test::chaos::Seed seed;
  INFO("seed " << seed.value());
  lumen::test::chaos::LeakCheck leaks;
  {
    MultiNodeCluster cluster({{{{"CPU", 1}}}}, {{"LUMEN_HEAD_RETRY_PERIOD_MS", "100"}});
    FaultProxy proxy({.target = cluster.head_address(),
                      .max_delay = std::chrono::milliseconds(0),
                      .reset_probability = 0,
                      .split_writes = false,
                      .seed = seed.value()});
    MultiNodeCluster::NodeSpec spec{{{"CPU", 2}}};
    spec.head_address = proxy.address();
    cluster.AddNode(spec);
    REQUIRE(WaitUntil([] { return AllCpusFree(3); }));
    // One bundle of 2 CPUs: only the proxied node can hold it.
    auto pg = lumen::CreatePlacementGroup({.bundles = {{{"CPU", 2}}}});
    REQUIRE(pg.Wait(std::chrono::seconds(20)));
    REQUIRE(WaitUntil([] { return lumen::test::chaos::ReadClusterUsage().free_cpus == 1; }));

    const uint64_t connections = proxy.connections();
    proxy.set_drop_from_target(true);   // what the head writes to the node is lost ...
    lumen::RemovePlacementGroup(pg.GetID());  // ... the cancel included (written before the reply)
    proxy.ResetAll();                   // ... and the link dies (unread bytes go with it)
    proxy.set_drop_from_target(false);
    REQUIRE(proxy.resets() >= 1);
    REQUIRE(WaitUntil([&] { return proxy.connections() > connections; },
                      std::chrono::seconds(10)));  // the node registers again
    CHECK(WaitUntil([] { return AllCpusFree(3); }, std::chrono::seconds(10)));
    INFO("free " << lumen::test::chaos::ReadClusterUsage().free_cpus << " of 3");
    CHECK(AllCpusFree(3));
  }
  CHECK(leaks.Leaks("") == "");
}
