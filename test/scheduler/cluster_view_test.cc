#include "lumen/scheduler/cluster_view.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

namespace lumen::scheduler {
namespace {

ResourceSet Make(const std::map<std::string, double>& m) {
  auto set = ResourceSet::FromMap(m);
  REQUIRE(set.ok());
  return *set;
}

ResourceSet Cpu(double n) { return Make({{"CPU", n}}); }

NodeResources Node(const std::map<std::string, double>& total,
                   const std::map<std::string, double>& available) {
  return {Make(total), Make(available), true};
}

NodeResources Idle(const std::map<std::string, double>& total) { return Node(total, total); }

// `node` with `used` of its `capacity` store bytes in use.
NodeResources Store(NodeResources node, uint64_t used, uint64_t capacity) {
  node.store_used = used;
  node.store_capacity = capacity;
  return node;
}

// A view of nodes "a", "b", "c" with 4 idle CPUs each.
ClusterResourceView ThreeIdleNodes() {
  ClusterResourceView view;
  for (const char* id : {"a", "b", "c"}) view.Upsert(id, Idle({{"CPU", 4}}));
  return view;
}

Placement Pick(ClusterResourceView& view, const ResourceSet& request,
               const SchedulingStrategy& strategy, const std::string& local,
               double spread_threshold = 0.5) {
  auto placement = view.PickNode(request, strategy, local, spread_threshold);
  INFO(placement.status().ToString());
  REQUIRE(placement.ok());
  return *placement;
}

// The status of a PickNode call that must fail.
absl::Status PickError(ClusterResourceView& view, const ResourceSet& request,
                       const SchedulingStrategy& strategy, const std::string& local) {
  auto placement = view.PickNode(request, strategy, local);
  REQUIRE_FALSE(placement.ok());
  return placement.status();
}

std::vector<std::string> Place(const ClusterResourceView& view,
                               const std::vector<ResourceSet>& bundles,
                               PlacementStrategy strategy) {
  auto ids = view.PlaceBundles(bundles, strategy);
  INFO(ids.status().ToString());
  REQUIRE(ids.ok());
  REQUIRE(ids->size() == bundles.size());
  return *ids;
}

absl::Status PlaceError(const ClusterResourceView& view, const std::vector<ResourceSet>& bundles,
                        PlacementStrategy strategy) {
  auto ids = view.PlaceBundles(bundles, strategy);
  REQUIRE_FALSE(ids.ok());
  return ids.status();
}

bool Contains(const absl::Status& status, const std::string& text) {
  return std::string(status.message()).find(text) != std::string::npos;
}

const SchedulingStrategy kDefault{};
const SchedulingStrategy kSpread{StrategyKind::kSpread};
const SchedulingStrategy kPack{StrategyKind::kPack};

SchedulingStrategy Affinity(const std::string& node, bool soft) {
  return {StrategyKind::kNodeAffinity, node, soft};
}

// ---- Bookkeeping ----

TEST_CASE("Upsert, Find, MarkDead and Remove", "[cluster_view]") {
  ClusterResourceView view;
  CHECK(view.Find("a") == nullptr);
  CHECK(view.nodes().empty());

  view.Upsert("b", Idle({{"CPU", 2}}));
  view.Upsert("a", Node({{"CPU", 4}}, {{"CPU", 1}}));
  REQUIRE(view.Find("a") != nullptr);
  CHECK(view.Find("a")->total == Cpu(4));
  CHECK(view.Find("a")->available == Cpu(1));
  CHECK(view.Find("a")->alive);
  CHECK(view.nodes().size() == 2);
  CHECK(view.nodes().begin()->first == "a");  // node id order

  // Upsert replaces everything, including liveness.
  view.MarkDead("a");
  CHECK_FALSE(view.Find("a")->alive);
  view.Upsert("a", Idle({{"CPU", 8}}));
  CHECK(view.Find("a")->alive);
  CHECK(view.Find("a")->available == Cpu(8));

  view.MarkDead("unknown");  // no-op
  view.Remove("unknown");    // no-op
  view.Remove("a");
  CHECK(view.Find("a") == nullptr);
  CHECK(view.nodes().size() == 1);
}

TEST_CASE("Subtract takes optimistically and clamps at zero", "[cluster_view]") {
  ClusterResourceView view;
  view.Upsert("a", Idle({{"CPU", 4}, {"GPU", 1}}));

  view.Subtract("a", Make({{"CPU", 1.5}, {"GPU", 0.25}}));
  CHECK(view.Find("a")->available == Make({{"CPU", 2.5}, {"GPU", 0.75}}));

  // More than the view has (the estimate is stale): never below zero.
  view.Subtract("a", Make({{"CPU", 3}, {"GPU", 0.5}, {"custom", 1}}));
  CHECK(view.Find("a")->available == Make({{"GPU", 0.25}}));

  view.Subtract("unknown", Cpu(1));  // no-op
  CHECK(view.nodes().size() == 1);
}

TEST_CASE("Add gives back, capped at the total", "[cluster_view]") {
  ClusterResourceView view;
  view.Upsert("a", Node({{"CPU", 4}, {"GPU", 1}}, {{"CPU", 1}}));

  view.Add("a", Make({{"CPU", 2}, {"GPU", 0.5}}));
  CHECK(view.Find("a")->available == Make({{"CPU", 3}, {"GPU", 0.5}}));

  // A double release, and a resource the node does not have.
  view.Add("a", Make({{"CPU", 2}, {"GPU", 1}, {"custom", 1}}));
  CHECK(view.Find("a")->available == Make({{"CPU", 4}, {"GPU", 1}}));

  view.Add("unknown", Cpu(1));  // no-op
  CHECK(view.Find("unknown") == nullptr);
}

TEST_CASE("IsFeasibleAnywhere looks at alive nodes' totals", "[cluster_view]") {
  ClusterResourceView view;
  CHECK_FALSE(view.IsFeasibleAnywhere(Cpu(1)));
  view.Upsert("small", Node({{"CPU", 2}}, {}));
  view.Upsert("big", Idle({{"CPU", 8}, {"GPU", 2}}));
  CHECK(view.IsFeasibleAnywhere(Cpu(2)));  // not free now, but fits the total
  CHECK(view.IsFeasibleAnywhere(Make({{"CPU", 8}, {"GPU", 2}})));
  CHECK(view.IsFeasibleAnywhere(ResourceSet()));
  CHECK_FALSE(view.IsFeasibleAnywhere(Cpu(9)));
  CHECK_FALSE(view.IsFeasibleAnywhere(Make({{"TPU", 1}})));
  view.MarkDead("big");
  CHECK_FALSE(view.IsFeasibleAnywhere(Make({{"GPU", 1}})));
  CHECK(view.IsFeasibleAnywhere(Cpu(2)));
}

// ---- PickNode: default (hybrid) ----

TEST_CASE("default stays local while local utilisation is below the threshold",
          "[cluster_view][default]") {
  ClusterResourceView view;
  view.Upsert("a", Idle({{"CPU", 4}}));
  view.Upsert("b", Node({{"CPU", 4}}, {{"CPU", 3}}));  // 25% used

  // Local "b" is used less than the threshold: it wins even though "a" is idle.
  Placement p = Pick(view, Cpu(1), kDefault, "b");
  CHECK(p.node_id == "b");
  CHECK(p.available_now);

  // At or above the threshold the least used node wins.
  CHECK(Pick(view, Cpu(1), kDefault, "b", /*spread_threshold=*/0.25).node_id == "a");
  view.Upsert("b", Node({{"CPU", 4}}, {{"CPU", 2}}));  // 50% used
  CHECK(Pick(view, Cpu(1), kDefault, "b").node_id == "a");
  // A threshold above 1 means always local when it fits now.
  CHECK(Pick(view, Cpu(1), kDefault, "b", 1.01).node_id == "b");
}

TEST_CASE("default picks the least used node that fits now", "[cluster_view][default]") {
  ClusterResourceView view;
  view.Upsert("a", Node({{"CPU", 4}}, {{"CPU", 1}}));  // 75% used
  view.Upsert("b", Node({{"CPU", 4}}, {{"CPU", 2}}));  // 50%
  view.Upsert("c", Node({{"CPU", 8}}, {{"CPU", 6}}));  // 25%
  view.Upsert("d", Node({{"CPU", 4}}, {}));            // full

  Placement p = Pick(view, Cpu(1), kDefault, "a");
  CHECK(p.node_id == "c");
  CHECK(p.available_now);
  // Only "c" fits 6 CPUs now.
  CHECK(Pick(view, Cpu(6), kDefault, "a").node_id == "c");
  // 2 CPUs fit "b" and "c" now; "c" is least used.
  CHECK(Pick(view, Cpu(2), kDefault, "d").node_id == "c");
  // When only "a" and "b" fit now, the least used of them.
  view.Upsert("c", Node({{"CPU", 8}}, {{"CPU", 0.5}}));
  CHECK(Pick(view, Cpu(1), kDefault, "d").node_id == "b");
}

TEST_CASE("default breaks ties local first, then by node id", "[cluster_view][default]") {
  ClusterResourceView view;
  for (const char* id : {"a", "b", "c"}) view.Upsert(id, Node({{"CPU", 4}}, {{"CPU", 2}}));

  // Local "c" is at the threshold (not below), all are equally used: local wins the tie.
  CHECK(Pick(view, Cpu(1), kDefault, "c").node_id == "c");
  // A local node that is unknown to the view: node id order.
  CHECK(Pick(view, Cpu(1), kDefault, "elsewhere").node_id == "a");
  // Local does not fit now: node id order among the rest.
  view.Upsert("a", Node({{"CPU", 4}}, {{"CPU", 0.5}}));
  CHECK(Pick(view, Cpu(1), kDefault, "a").node_id == "b");
}

TEST_CASE("default utilisation counts the requested resources and CPU only",
          "[cluster_view][default]") {
  ClusterResourceView view;
  // "a" has its GPU busy but CPUs idle; "b" has a quarter of its CPUs busy.
  view.Upsert("a", Node({{"CPU", 4}, {"GPU", 1}}, {{"CPU", 4}}));
  view.Upsert("b", Node({{"CPU", 4}}, {{"CPU", 3}}));

  // A CPU-only request does not see "a"'s busy GPU: "a" is idle for it.
  CHECK(Pick(view, Cpu(1), kDefault, "x").node_id == "a");
  // Custom resources the request does not name are ignored as well.
  view.Upsert("a", Node({{"CPU", 4}, {"disk", 10}}, {{"CPU", 4}}));
  CHECK(Pick(view, Cpu(1), kDefault, "x").node_id == "a");
  // But a request naming "disk" sees it fully used.
  view.Upsert("b", Node({{"CPU", 4}, {"disk", 10}}, {{"CPU", 3}, {"disk", 10}}));
  view.Upsert("a", Node({{"CPU", 4}, {"disk", 10}}, {{"CPU", 4}, {"disk", 1}}));
  CHECK(Pick(view, Make({{"CPU", 1}, {"disk", 1}}), kDefault, "x").node_id == "b");
  // CPU always counts, even when the request asks for none.
  view.Upsert("a", Node({{"CPU", 4}, {"GPU", 2}}, {{"CPU", 1}, {"GPU", 2}}));
  view.Upsert("b", Node({{"CPU", 4}, {"GPU", 2}}, {{"CPU", 3}, {"GPU", 1}}));
  // a: max(CPU 75%, GPU 0%) = 75%; b: max(25%, 50%) = 50%.
  CHECK(Pick(view, Make({{"GPU", 1}}), kDefault, "x").node_id == "b");
}

TEST_CASE("default waits on the local node when nothing fits now", "[cluster_view][default]") {
  ClusterResourceView view;
  view.Upsert("a", Node({{"CPU", 4}}, {}));
  view.Upsert("b", Node({{"CPU", 4}}, {{"CPU", 1}}));
  view.Upsert("c", Node({{"CPU", 2}}, {}));

  Placement p = Pick(view, Cpu(2), kDefault, "b");
  CHECK(p.node_id == "b");
  CHECK_FALSE(p.available_now);

  // Local "c" can never fit 3 CPUs: the least used feasible node ("b", 75%
  // used, vs "a", 100%).
  p = Pick(view, Cpu(3), kDefault, "c");
  CHECK(p.node_id == "b");
  CHECK_FALSE(p.available_now);

  // A dead local node is not waited on.
  view.MarkDead("b");
  p = Pick(view, Cpu(2), kDefault, "b");
  CHECK(p.node_id == "a");
  CHECK_FALSE(p.available_now);
}

TEST_CASE("StoreFraction is used over capacity, 0 when unknown", "[cluster_view][store]") {
  CHECK(Idle({{"CPU", 4}}).StoreFraction() == 0);
  CHECK(Store(Idle({{"CPU", 4}}), 5, 0).StoreFraction() == 0);
  CHECK(Store(Idle({{"CPU", 4}}), 25, 100).StoreFraction() == 0.25);
  CHECK(Store(Idle({{"CPU", 4}}), 150, 100).StoreFraction() == 1);
  CHECK_FALSE(Store(Idle({{"CPU", 4}}), 79, 100).StoreNearlyFull());
  CHECK(Store(Idle({{"CPU", 4}}), 80, 100).StoreNearlyFull());
  CHECK(kStoreNearlyFull == 0.8);
}

TEST_CASE("default sends work away from a local node whose store is nearly full",
          "[cluster_view][default][store]") {
  ClusterResourceView view;
  // Local "a" is idle but its store is 90% full; "b" has half its CPUs busy
  // and an empty store.
  view.Upsert("a", Store(Idle({{"CPU", 4}}), 90, 100));
  view.Upsert("b", Node({{"CPU", 4}}, {{"CPU", 2}}));
  Placement p = Pick(view, Cpu(1), kDefault, "a");
  CHECK(p.node_id == "b");
  CHECK(p.available_now);
  // Even a threshold that always keeps work local does not keep it there.
  CHECK(Pick(view, Cpu(1), kDefault, "a", /*spread_threshold=*/1.01).node_id == "b");

  // Exactly at the threshold counts as nearly full; just below does not.
  view.Upsert("a", Store(Idle({{"CPU", 4}}), 80, 100));
  CHECK(Pick(view, Cpu(1), kDefault, "a", 1.01).node_id == "b");
  view.Upsert("a", Store(Idle({{"CPU", 4}}), 79, 100));
  CHECK(Pick(view, Cpu(1), kDefault, "a", 1.01).node_id == "a");

  // The node with room is chosen even when the request has to wait there.
  view.Upsert("a", Store(Idle({{"CPU", 4}}), 95, 100));
  view.Upsert("b", Node({{"CPU", 4}}, {}));
  p = Pick(view, Cpu(1), kDefault, "a");
  CHECK(p.node_id == "b");
  CHECK_FALSE(p.available_now);
  // ... but not a node that can never run it.
  view.Upsert("b", Idle({{"CPU", 1}}));
  p = Pick(view, Cpu(2), kDefault, "a");
  CHECK(p.node_id == "a");
  CHECK(p.available_now);
  // A dead node's store does not count as room.
  view.Upsert("b", Idle({{"CPU", 4}}));
  view.MarkDead("b");
  CHECK(Pick(view, Cpu(1), kDefault, "a").node_id == "a");
}

TEST_CASE("default behaves as without stores when every store is nearly full",
          "[cluster_view][default][store]") {
  ClusterResourceView view;
  view.Upsert("a", Store(Node({{"CPU", 4}}, {{"CPU", 3}}), 99, 100));  // 25% CPU used
  view.Upsert("b", Store(Idle({{"CPU", 4}}), 80, 100));
  // All nearly full: none is left out, and local "a" is below the threshold
  // on CPU but its store fraction (0.99) counts: the least used wins ("b", 0.8).
  CHECK(Pick(view, Cpu(1), kDefault, "a").node_id == "b");
  // With a threshold that keeps work local, local as before.
  CHECK(Pick(view, Cpu(1), kDefault, "a", /*spread_threshold=*/1.01).node_id == "a");
  // Nothing fits now anywhere: wait on the local node, as before.
  view.Upsert("a", Store(Node({{"CPU", 4}}, {}), 99, 100));
  view.Upsert("b", Store(Node({{"CPU", 4}}, {}), 90, 100));
  Placement p = Pick(view, Cpu(1), kDefault, "a");
  CHECK(p.node_id == "a");
  CHECK_FALSE(p.available_now);
}

TEST_CASE("default utilisation counts the store fraction", "[cluster_view][default][store]") {
  ClusterResourceView view;
  // Both below the nearly-full line. "a": CPU 25% used, store 60%; "b": CPU
  // 50% used, store empty. Utilisation: a = max(0.25, 0.6) = 0.6, b = 0.5.
  view.Upsert("a", Store(Node({{"CPU", 4}}, {{"CPU", 3}}), 60, 100));
  view.Upsert("b", Node({{"CPU", 4}}, {{"CPU", 2}}));
  CHECK(Pick(view, Cpu(1), kDefault, "x").node_id == "b");
  // Local "a" is at or above the spread threshold because of its store.
  CHECK(Pick(view, Cpu(1), kDefault, "a").node_id == "b");
  // Below the threshold it stays local.
  view.Upsert("a", Store(Node({{"CPU", 4}}, {{"CPU", 3}}), 40, 100));
  CHECK(Pick(view, Cpu(1), kDefault, "a").node_id == "a");
  // Without the store "a" (25%) would beat "b" (50%); with it, 0.55 vs 0.5.
  view.Upsert("a", Store(Node({{"CPU", 4}}, {{"CPU", 3}}), 55, 100));
  CHECK(Pick(view, Cpu(1), kDefault, "x").node_id == "b");
  // A soft node affinity falling back to default sees the store too.
  CHECK(Pick(view, Cpu(1), Affinity("gone", /*soft=*/true), "x").node_id == "b");
}

TEST_CASE("spread, pack and node affinity ignore stores", "[cluster_view][store]") {
  ClusterResourceView view;
  view.Upsert("a", Store(Node({{"CPU", 4}}, {{"CPU", 2}}), 100, 100));
  view.Upsert("b", Idle({{"CPU", 4}}));
  // Pack: the busiest node that fits, full store or not.
  CHECK(Pick(view, Cpu(1), kPack, "b").node_id == "a");
  // Hard affinity to the full node.
  CHECK(Pick(view, Cpu(1), Affinity("a", false), "b").node_id == "a");
  // Spread cycles over both.
  std::set<std::string> seen;
  for (int i = 0; i < 2; ++i) seen.insert(Pick(view, Cpu(1), kSpread, "b").node_id);
  CHECK(seen == std::set<std::string>{"a", "b"});
}

TEST_CASE("PickNode never returns a dead node", "[cluster_view][default]") {
  ClusterResourceView view = ThreeIdleNodes();
  view.MarkDead("a");
  view.MarkDead("b");
  for (const SchedulingStrategy& strategy : {kDefault, kSpread, kPack}) {
    for (int i = 0; i < 4; ++i) {
      Placement p = Pick(view, Cpu(1), strategy, "a");
      CHECK(p.node_id == "c");
      CHECK(p.available_now);
    }
  }
  view.MarkDead("c");
  absl::Status status = PickError(view, Cpu(1), kDefault, "a");
  CHECK(status.code() == absl::StatusCode::kFailedPrecondition);
  CHECK(Contains(status, "0 of 3 known nodes alive"));
}

TEST_CASE("an infeasible request fails with FailedPrecondition naming it",
          "[cluster_view][default]") {
  ClusterResourceView view = ThreeIdleNodes();
  for (const SchedulingStrategy& strategy : {kDefault, kSpread, kPack}) {
    absl::Status status = PickError(view, Make({{"CPU", 1}, {"GPU", 1}}), strategy, "a");
    CHECK(status.code() == absl::StatusCode::kFailedPrecondition);
    CHECK(Contains(status, "{CPU: 1, GPU: 1}"));
    CHECK(Contains(status, "infeasible"));
  }
  ClusterResourceView empty;
  CHECK(PickError(empty, Cpu(1), kDefault, "a").code() == absl::StatusCode::kFailedPrecondition);
}

TEST_CASE("an empty request fits anywhere", "[cluster_view][default]") {
  ClusterResourceView view = ThreeIdleNodes();
  Placement p = Pick(view, ResourceSet(), kDefault, "b");
  CHECK(p.node_id == "b");
  CHECK(p.available_now);
}

// ---- PickNode: spread ----

TEST_CASE("spread cycles over three nodes in node id order", "[cluster_view][spread]") {
  ClusterResourceView view = ThreeIdleNodes();
  std::vector<std::string> picks;
  for (int i = 0; i < 7; ++i) {
    Placement p = Pick(view, Cpu(1), kSpread, "b");
    CHECK(p.available_now);
    picks.push_back(p.node_id);
  }
  CHECK(picks == std::vector<std::string>{"a", "b", "c", "a", "b", "c", "a"});
}

TEST_CASE("spread skips nodes that do not fit now", "[cluster_view][spread]") {
  ClusterResourceView view = ThreeIdleNodes();
  view.Upsert("b", Node({{"CPU", 4}}, {{"CPU", 0.5}}));
  std::vector<std::string> picks;
  for (int i = 0; i < 4; ++i) picks.push_back(Pick(view, Cpu(1), kSpread, "b").node_id);
  CHECK(picks == std::vector<std::string>{"a", "c", "a", "c"});

  // Subtract-ing after each pick drains the nodes evenly.
  ClusterResourceView drained = ThreeIdleNodes();
  std::map<std::string, int> count;
  for (int i = 0; i < 12; ++i) {
    Placement p = Pick(drained, Cpu(1), kSpread, "a");
    REQUIRE(p.available_now);
    drained.Subtract(p.node_id, Cpu(1));
    ++count[p.node_id];
  }
  CHECK(count == std::map<std::string, int>{{"a", 4}, {"b", 4}, {"c", 4}});
  // Nothing fits now: round robin over the feasible nodes, to wait there.
  std::vector<std::string> waits;
  for (int i = 0; i < 3; ++i) {
    Placement p = Pick(drained, Cpu(1), kSpread, "a");
    CHECK_FALSE(p.available_now);
    waits.push_back(p.node_id);
  }
  CHECK(waits == std::vector<std::string>{"a", "b", "c"});
}

TEST_CASE("spread keeps cycling as nodes come and go", "[cluster_view][spread]") {
  ClusterResourceView view = ThreeIdleNodes();
  CHECK(Pick(view, Cpu(1), kSpread, "a").node_id == "a");
  CHECK(Pick(view, Cpu(1), kSpread, "a").node_id == "b");
  view.Upsert("bb", Idle({{"CPU", 4}}));  // between "b" and "c"
  CHECK(Pick(view, Cpu(1), kSpread, "a").node_id == "bb");
  view.MarkDead("c");
  CHECK(Pick(view, Cpu(1), kSpread, "a").node_id == "a");  // wraps around
  view.Remove("b");
  CHECK(Pick(view, Cpu(1), kSpread, "a").node_id == "bb");
  // Only feasible nodes take part.
  view.Upsert("big", Idle({{"CPU", 16}}));
  CHECK(Pick(view, Cpu(8), kSpread, "a").node_id == "big");
  CHECK(Pick(view, Cpu(8), kSpread, "a").node_id == "big");
}

// ---- PickNode: pack ----

TEST_CASE("pack fills one node before the next", "[cluster_view][pack]") {
  ClusterResourceView view = ThreeIdleNodes();
  std::vector<std::string> picks;
  for (int i = 0; i < 12; ++i) {
    Placement p = Pick(view, Cpu(1), kPack, "b");
    REQUIRE(p.available_now);
    view.Subtract(p.node_id, Cpu(1));
    picks.push_back(p.node_id);
  }
  // All idle: the local node wins the tie; once it is full, node id order.
  std::vector<std::string> expected;
  for (const char* id : {"b", "a", "c"}) expected.insert(expected.end(), 4, id);
  CHECK(picks == expected);

  // Nothing fits now: like default, wait on the local node.
  Placement p = Pick(view, Cpu(1), kPack, "b");
  CHECK(p.node_id == "b");
  CHECK_FALSE(p.available_now);
}

TEST_CASE("pack picks the most used node that fits now", "[cluster_view][pack]") {
  ClusterResourceView view;
  view.Upsert("a", Node({{"CPU", 4}}, {{"CPU", 1}}));  // 75%
  view.Upsert("b", Node({{"CPU", 4}}, {{"CPU", 2}}));  // 50%
  view.Upsert("c", Node({{"CPU", 4}}, {{"CPU", 1}}));  // 75%
  view.Upsert("d", Node({{"CPU", 4}}, {}));            // 100%, fits nothing now

  CHECK(Pick(view, Cpu(1), kPack, "x").node_id == "a");  // tie a/c: node id order
  CHECK(Pick(view, Cpu(1), kPack, "c").node_id == "c");  // tie: local first
  CHECK(Pick(view, Cpu(2), kPack, "c").node_id == "b");  // only "b" fits 2 now

  // Nothing fits now and local is too small: the least used feasible node.
  view.Upsert("small", Idle({{"CPU", 1}}));
  Placement p = Pick(view, Cpu(3), kPack, "small");
  CHECK(p.node_id == "b");
  CHECK_FALSE(p.available_now);
}

// ---- PickNode: node affinity ----

TEST_CASE("hard node affinity goes to that node or fails", "[cluster_view][affinity]") {
  ClusterResourceView view = ThreeIdleNodes();
  view.Upsert("busy", Node({{"CPU", 4}}, {}));

  Placement p = Pick(view, Cpu(1), Affinity("c", false), "a");
  CHECK(p.node_id == "c");
  CHECK(p.available_now);
  // Feasible but busy: still that node, to wait there.
  p = Pick(view, Cpu(1), Affinity("busy", false), "a");
  CHECK(p.node_id == "busy");
  CHECK_FALSE(p.available_now);

  absl::Status unknown = PickError(view, Cpu(1), Affinity("nope", false), "a");
  CHECK(unknown.code() == absl::StatusCode::kFailedPrecondition);
  CHECK(Contains(unknown, "node 6e6f7065 is unknown"));  // "nope" as hex
  CHECK(Contains(unknown, "{CPU: 1}"));

  view.MarkDead("c");
  absl::Status dead = PickError(view, Cpu(1), Affinity("c", false), "a");
  CHECK(dead.code() == absl::StatusCode::kFailedPrecondition);
  CHECK(Contains(dead, "node 63 is dead"));

  absl::Status small = PickError(view, Cpu(5), Affinity("b", false), "a");
  CHECK(small.code() == absl::StatusCode::kFailedPrecondition);
  CHECK(Contains(small, "node 62 is too small (total {CPU: 4})"));
  CHECK(Contains(small, "{CPU: 5}"));
}

TEST_CASE("a hard affinity to an unknown binary node id names the node in hex", "[cluster_view][affinity]") {
  // Invariant: the refusal names the node as the other messages do (its id
  // in lowercase hex, as NodeId::Hex), never as the raw bytes of the id.
  ClusterResourceView view = ThreeIdleNodes();
  std::string id("\x00\x01\xab\xff\n'", 6);
  absl::Status unknown = PickError(view, Cpu(1), Affinity(id, false), "a");
  CHECK(unknown.code() == absl::StatusCode::kFailedPrecondition);
  INFO(unknown.message());
  CHECK(Contains(unknown, "cannot place {CPU: 1} by hard node affinity: node 0001abff0a27 is unknown"));
  CHECK(std::string(unknown.message()).find(id) == std::string::npos);
  CHECK(std::string(unknown.message()).find('\xff') == std::string::npos);
}

TEST_CASE("soft node affinity falls back to default", "[cluster_view][affinity]") {
  ClusterResourceView view = ThreeIdleNodes();
  view.Upsert("big", Idle({{"CPU", 8}}));

  CHECK(Pick(view, Cpu(1), Affinity("c", true), "a").node_id == "c");
  // Unknown: default keeps it local.
  CHECK(Pick(view, Cpu(1), Affinity("nope", true), "a").node_id == "a");
  // Dead.
  view.MarkDead("c");
  CHECK(Pick(view, Cpu(1), Affinity("c", true), "b").node_id == "b");
  // Too small: the only node that fits.
  Placement p = Pick(view, Cpu(6), Affinity("a", true), "a");
  CHECK(p.node_id == "big");
  CHECK(p.available_now);
  // Still infeasible anywhere: the default policy's error.
  absl::Status status = PickError(view, Cpu(9), Affinity("a", true), "a");
  CHECK(status.code() == absl::StatusCode::kFailedPrecondition);
  CHECK(Contains(status, "infeasible"));
}

// ---- PlaceBundles ----

TEST_CASE("PlacementStrategyName", "[cluster_view][placement_group]") {
  CHECK(PlacementStrategyName(PlacementStrategy::kPack) == "PACK");
  CHECK(PlacementStrategyName(PlacementStrategy::kSpread) == "SPREAD");
  CHECK(PlacementStrategyName(PlacementStrategy::kStrictPack) == "STRICT_PACK");
  CHECK(PlacementStrategyName(PlacementStrategy::kStrictSpread) == "STRICT_SPREAD");
}

TEST_CASE("PlaceBundles rejects an empty group and a cluster with no alive node",
          "[cluster_view][placement_group]") {
  ClusterResourceView view = ThreeIdleNodes();
  absl::Status empty = PlaceError(view, {}, PlacementStrategy::kPack);
  CHECK(empty.code() == absl::StatusCode::kInvalidArgument);

  for (const char* id : {"a", "b", "c"}) view.MarkDead(id);
  absl::Status none = PlaceError(view, {Cpu(1)}, PlacementStrategy::kSpread);
  CHECK(none.code() == absl::StatusCode::kFailedPrecondition);
  CHECK(Contains(none, "no alive nodes"));
  CHECK(Contains(none, "SPREAD placement group of 1 bundles [{CPU: 1}]"));
}

TEST_CASE("a bundle bigger than every node can never be placed",
          "[cluster_view][placement_group]") {
  ClusterResourceView view = ThreeIdleNodes();
  view.Upsert("gpu", Node({{"CPU", 1}, {"GPU", 8}}, {{"CPU", 1}}));
  for (PlacementStrategy strategy :
       {PlacementStrategy::kPack, PlacementStrategy::kSpread, PlacementStrategy::kStrictPack,
        PlacementStrategy::kStrictSpread}) {
    absl::Status status = PlaceError(view, {Cpu(1), Make({{"CPU", 2}, {"GPU", 1}})}, strategy);
    CHECK(status.code() == absl::StatusCode::kFailedPrecondition);
    CHECK(Contains(status, "bundle 1 {CPU: 2, GPU: 1} is bigger than every alive node"));
  }
}

TEST_CASE("STRICT_PACK puts every bundle on one node", "[cluster_view][placement_group]") {
  ClusterResourceView view;
  view.Upsert("a", Node({{"CPU", 8}}, {{"CPU", 4}}));  // 50% used
  view.Upsert("b", Node({{"CPU", 8}}, {{"CPU", 6}}));  // 25% used
  view.Upsert("c", Idle({{"CPU", 2}}));

  // Fits "a" and "b" now: the one with the most free room.
  CHECK(Place(view, {Cpu(2), Cpu(2)}, PlacementStrategy::kStrictPack) ==
        std::vector<std::string>{"b", "b"});
  CHECK(Place(view, {Cpu(1)}, PlacementStrategy::kStrictPack) == std::vector<std::string>{"c"});
  CHECK(Place(view, {Cpu(3), Cpu(3)}, PlacementStrategy::kStrictPack) ==
        std::vector<std::string>{"b", "b"});

  // Fits a node's total but not what is free now.
  absl::Status later = PlaceError(view, {Cpu(4), Cpu(3)}, PlacementStrategy::kStrictPack);
  CHECK(later.code() == absl::StatusCode::kResourceExhausted);
  CHECK(Contains(later, "STRICT_PACK placement group of 2 bundles [{CPU: 4}, {CPU: 3}]"));

  // Each bundle fits a node, but their sum fits none.
  absl::Status never = PlaceError(view, {Cpu(5), Cpu(4)}, PlacementStrategy::kStrictPack);
  CHECK(never.code() == absl::StatusCode::kFailedPrecondition);
  CHECK(Contains(never, "their sum {CPU: 9} is bigger than every alive node"));
}

TEST_CASE("PACK packs strictly when it can, else greedily", "[cluster_view][placement_group]") {
  ClusterResourceView view;
  view.Upsert("a", Idle({{"CPU", 4}}));
  view.Upsert("b", Idle({{"CPU", 4}}));
  view.Upsert("c", Idle({{"CPU", 2}}));

  CHECK(Place(view, {Cpu(1), Cpu(2), Cpu(1)}, PlacementStrategy::kPack) ==
        std::vector<std::string>{"a", "a", "a"});
  // 3 + 3 + 1 fits no single node: "a" takes the first, the second moves to
  // "b", and the third stays on "b" while it fits.
  CHECK(Place(view, {Cpu(3), Cpu(3), Cpu(1)}, PlacementStrategy::kPack) ==
        std::vector<std::string>{"a", "b", "b"});
  // The next node is the one with the most free room that fits: 3 -> "a";
  // 2 -> "c" (idle, vs "b" 25% used); "c" is then full, so 1 -> "b" (25%
  // used, vs "a" 75%).
  view.Upsert("b", Node({{"CPU", 4}}, {{"CPU", 3}}));
  CHECK(Place(view, {Cpu(3), Cpu(2), Cpu(1)}, PlacementStrategy::kPack) ==
        std::vector<std::string>{"a", "c", "b"});
}

TEST_CASE("PACK finds a placement the greedy pass misses", "[cluster_view][placement_group]") {
  ClusterResourceView view;
  view.Upsert("a", Idle({{"CPU", 3}}));
  view.Upsert("b", Idle({{"CPU", 2}}));
  // Greedy: 1 -> a, 1 -> a, then 3 fits nowhere. Largest first works.
  CHECK(Place(view, {Cpu(1), Cpu(1), Cpu(3)}, PlacementStrategy::kPack) ==
        std::vector<std::string>{"b", "b", "a"});
}

TEST_CASE("PACK: not now vs never", "[cluster_view][placement_group]") {
  ClusterResourceView view;
  view.Upsert("a", Node({{"CPU", 2}}, {{"CPU", 1}}));
  view.Upsert("b", Node({{"CPU", 2}}, {{"CPU", 1}}));

  CHECK(Place(view, {Cpu(1), Cpu(1)}, PlacementStrategy::kPack) ==
        std::vector<std::string>{"a", "b"});
  absl::Status later = PlaceError(view, {Cpu(2), Cpu(1)}, PlacementStrategy::kPack);
  CHECK(later.code() == absl::StatusCode::kResourceExhausted);
  absl::Status never = PlaceError(view, {Cpu(2), Cpu(2), Cpu(1)}, PlacementStrategy::kPack);
  CHECK(never.code() == absl::StatusCode::kFailedPrecondition);
  CHECK(Contains(never, "totals cannot hold it"));
}

TEST_CASE("STRICT_SPREAD puts each bundle on a distinct node", "[cluster_view][placement_group]") {
  ClusterResourceView view = ThreeIdleNodes();
  std::vector<std::string> ids =
      Place(view, {Cpu(1), Cpu(1), Cpu(1)}, PlacementStrategy::kStrictSpread);
  CHECK(std::set<std::string>(ids.begin(), ids.end()) == std::set<std::string>{"a", "b", "c"});

  // Emptiest nodes first.
  view.Upsert("a", Node({{"CPU", 4}}, {{"CPU", 2}}));
  CHECK(Place(view, {Cpu(1), Cpu(1)}, PlacementStrategy::kStrictSpread) ==
        std::vector<std::string>{"b", "c"});

  // Dead nodes do not count.
  view.MarkDead("b");
  CHECK(Place(view, {Cpu(1), Cpu(1)}, PlacementStrategy::kStrictSpread) ==
        std::vector<std::string>{"c", "a"});
  absl::Status never = PlaceError(view, {Cpu(1), Cpu(1), Cpu(1)}, PlacementStrategy::kStrictSpread);
  CHECK(never.code() == absl::StatusCode::kFailedPrecondition);
  CHECK(Contains(never, "3 bundles need distinct nodes but only 2 nodes are alive"));

  // Enough nodes, but one lacks the free CPUs now.
  view.Upsert("a", Node({{"CPU", 4}}, {{"CPU", 0.5}}));
  absl::Status later = PlaceError(view, {Cpu(1), Cpu(1)}, PlacementStrategy::kStrictSpread);
  CHECK(later.code() == absl::StatusCode::kResourceExhausted);
}

TEST_CASE("STRICT_SPREAD backtracks out of a bad first choice",
          "[cluster_view][placement_group]") {
  ClusterResourceView view;
  view.Upsert("a", Idle({{"X", 1}, {"Y", 1}}));
  view.Upsert("b", Idle({{"X", 1}}));
  // X first goes to "a" (tie, node id order); then Y fits only "a", which is
  // taken: back up and put X on "b".
  CHECK(Place(view, {Make({{"X", 1}}), Make({{"Y", 1}})}, PlacementStrategy::kStrictSpread) ==
        std::vector<std::string>{"b", "a"});
}

TEST_CASE("STRICT_SPREAD infeasible on totals, though each bundle fits some node",
          "[cluster_view][placement_group]") {
  ClusterResourceView view;
  view.Upsert("gpu", Idle({{"CPU", 4}, {"GPU", 1}}));
  view.Upsert("cpu1", Idle({{"CPU", 4}}));
  view.Upsert("cpu2", Idle({{"CPU", 4}}));
  // Two GPU bundles need two distinct GPU nodes; there is one.
  absl::Status never = PlaceError(view, {Make({{"GPU", 1}}), Make({{"GPU", 1}}), Cpu(1)},
                                  PlacementStrategy::kStrictSpread);
  CHECK(never.code() == absl::StatusCode::kFailedPrecondition);
  CHECK(Contains(never, "totals cannot hold it"));
  CHECK(Contains(never, "[{GPU: 1}, {GPU: 1}, {CPU: 1}]"));
}

TEST_CASE("STRICT_SPREAD over many identical nodes answers quickly",
          "[cluster_view][placement_group]") {
  ClusterResourceView view;
  for (int i = 0; i < 16; ++i) view.Upsert("n" + std::to_string(10 + i), Idle({{"CPU", 1}}));
  // One node is busy: 16 bundles cannot go now, but could once it frees up.
  view.Upsert("n10", Node({{"CPU", 1}}, {}));
  std::vector<ResourceSet> bundles(16, Cpu(1));
  absl::Status later = PlaceError(view, bundles, PlacementStrategy::kStrictSpread);
  CHECK(later.code() == absl::StatusCode::kResourceExhausted);
  bundles.pop_back();
  std::vector<std::string> ids = Place(view, bundles, PlacementStrategy::kStrictSpread);
  CHECK(std::set<std::string>(ids.begin(), ids.end()).size() == 15);
  CHECK(std::find(ids.begin(), ids.end(), "n10") == ids.end());
}

TEST_CASE("SPREAD uses distinct nodes where possible, reusing only when needed",
          "[cluster_view][placement_group]") {
  ClusterResourceView view;
  view.Upsert("a", Idle({{"CPU", 2}}));
  view.Upsert("b", Idle({{"CPU", 2}}));
  view.Upsert("c", Node({{"CPU", 2}}, {}));

  CHECK(Place(view, {Cpu(1), Cpu(1)}, PlacementStrategy::kSpread) ==
        std::vector<std::string>{"a", "b"});
  // Three bundles, two nodes with room: one is reused.
  std::vector<std::string> ids = Place(view, {Cpu(1), Cpu(1), Cpu(1)}, PlacementStrategy::kSpread);
  CHECK(std::count(ids.begin(), ids.end(), "a") + std::count(ids.begin(), ids.end(), "b") == 3);
  CHECK(std::count(ids.begin(), ids.end(), "a") >= 1);
  CHECK(std::count(ids.begin(), ids.end(), "b") >= 1);
  // Four fill both.
  ids = Place(view, {Cpu(1), Cpu(1), Cpu(1), Cpu(1)}, PlacementStrategy::kSpread);
  CHECK(std::count(ids.begin(), ids.end(), "a") == 2);
  CHECK(std::count(ids.begin(), ids.end(), "b") == 2);

  // Five fit the totals (6 CPUs) but not what is free now (4).
  absl::Status later = PlaceError(view, std::vector<ResourceSet>(5, Cpu(1)),
                                  PlacementStrategy::kSpread);
  CHECK(later.code() == absl::StatusCode::kResourceExhausted);
  // Seven never fit.
  absl::Status never = PlaceError(view, std::vector<ResourceSet>(7, Cpu(1)),
                                  PlacementStrategy::kSpread);
  CHECK(never.code() == absl::StatusCode::kFailedPrecondition);
}

TEST_CASE("PlaceBundles results can be committed with Subtract",
          "[cluster_view][placement_group]") {
  ClusterResourceView view = ThreeIdleNodes();
  std::vector<ResourceSet> bundles = {Cpu(2), Cpu(2)};
  std::vector<std::string> first = Place(view, bundles, PlacementStrategy::kStrictSpread);
  for (size_t i = 0; i < bundles.size(); ++i) view.Subtract(first[i], bundles[i]);
  CHECK(first == std::vector<std::string>{"a", "b"});
  // The next group prefers the untouched node.
  CHECK(Place(view, {Cpu(2)}, PlacementStrategy::kStrictSpread) ==
        std::vector<std::string>{"c"});
  CHECK(Place(view, bundles, PlacementStrategy::kStrictSpread) ==
        std::vector<std::string>{"c", "a"});
}

}  // namespace
}  // namespace lumen::scheduler
