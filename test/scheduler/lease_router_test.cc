// Deterministic tests of lease routing (no sockets, no processes).
#include "lumen/scheduler/lease_router.h"

#include <map>
#include <set>
#include <string>

#include <catch2/catch.hpp>

namespace lumen::scheduler {
namespace {

ResourceSet Make(const std::map<std::string, double>& m) {
  auto set = ResourceSet::FromMap(m);
  REQUIRE(set.ok());
  return *set;
}
ResourceSet Cpu(double n) { return Make({{"CPU", n}}); }

// A node "local" with 4 CPUs, a remote "far" with 8, and the bundle maps the
// daemon would hold; every test routes against it.
struct Fixture {
  ClusterResourceView view;
  std::string local = "local";
  LocalResourceManager local_resources{Cpu(4)};
  absl::flat_hash_map<std::string, ReservedBundle> reserved;
  absl::flat_hash_map<std::string, BundlePlacement> placements;
  std::set<std::string> removed;
  std::set<std::string> addressed{"local", "far"};

  Fixture() {
    view.Upsert("local", {Cpu(4), Cpu(4), true});
    view.Upsert("far", {Cpu(8), Cpu(8), true});
  }
  LeaseRoute Route(const LeaseRouteRequest& request) {
    LeaseRoutingInputs in{view,     local,
                          local_resources, reserved,
                          placements,
                          [&](const std::string& g) { return removed.contains(g); },
                          [&](const std::string& n) { return addressed.contains(n); }};
    return RouteLease(request, in);
  }
};

TEST_CASE("a request that fits here is granted here") {
  // Invariant: the default policy keeps work on an idle local node that fits it.
  Fixture f;
  LeaseRoute r = f.Route({.placement = Cpu(1), .name = "f"});
  CHECK(r.kind == LeaseRouteKind::kGrantHere);
}

TEST_CASE("a request too big for this node spills back to a node that fits, once") {
  // Invariant: a spillback names an alive node that fits, and the view takes the
  // request from that node so the next decision sees it as used.
  Fixture f;
  LeaseRoute r = f.Route({.placement = Cpu(6), .name = "big"});
  REQUIRE(r.kind == LeaseRouteKind::kSpillback);
  CHECK(r.node_id == "far");
  CHECK(f.view.Find("far")->available.Get("CPU") == 2);
}

TEST_CASE("a request no node can ever run is parked as infeasible") {
  // Invariant: infeasible work waits (parked) instead of failing, and says so.
  Fixture f;
  LeaseRoute r = f.Route({.placement = Cpu(64), .name = "huge"});
  CHECK(r.kind == LeaseRouteKind::kPark);
  CHECK(r.infeasible);
}

TEST_CASE("an unmet hard node affinity is refused with the node named") {
  // Invariant: a hard affinity never silently runs elsewhere.
  Fixture f;
  f.view.MarkDead("far");
  LeaseRouteRequest request{.placement = Cpu(1), .name = "pinned"};
  request.strategy.kind = StrategyKind::kNodeAffinity;
  request.strategy.node_id = "far";
  request.strategy.soft = false;
  LeaseRoute r = f.Route(request);
  REQUIRE(r.kind == LeaseRouteKind::kRefuse);
  CHECK(r.error.find("pinned must run on node") != std::string::npos);
}

TEST_CASE("a forwarded request is granted if it can ever fit here, else sent back") {
  // Invariant: a grant-or-reject request is never spilled a second time.
  Fixture f;
  CHECK(f.Route({.placement = Cpu(4), .grant_or_reject = true}).kind ==
        LeaseRouteKind::kGrantHere);
  CHECK(f.Route({.placement = Cpu(5), .grant_or_reject = true}).kind == LeaseRouteKind::kRetry);
}

TEST_CASE("a forwarded DEFAULT request that does not fit here now goes back while another node has room") {
  // Invariant: a spilled request is not queued behind busy resources here
  // while the policy on this node's view would run it elsewhere now (the
  // sender's view was stale); it waits here only when no node has room now,
  // or when it must run here (node affinity). Before the fix it was queued
  // here whenever it could ever fit, and a barrier across nodes never met.
  Fixture f;
  f.view.Upsert("local", {Cpu(4), Cpu(0), true});  // all 4 CPUs leased or queued
  LeaseRoute r = f.Route({.placement = Cpu(1), .grant_or_reject = true, .name = "t"});
  CHECK(r.kind == LeaseRouteKind::kRetry);
  CHECK(f.view.Find("far")->available.Get("CPU") == 8);  // nothing taken from far

  LeaseRouteRequest pinned{.placement = Cpu(1), .grant_or_reject = true, .name = "pinned"};
  pinned.strategy.kind = StrategyKind::kNodeAffinity;
  pinned.strategy.node_id = "local";
  CHECK(f.Route(pinned).kind == LeaseRouteKind::kGrantHere);

  f.view.Upsert("far", {Cpu(8), Cpu(0), true});  // no node has room now: wait here
  CHECK(f.Route({.placement = Cpu(1), .grant_or_reject = true}).kind ==
        LeaseRouteKind::kGrantHere);
  f.view.Upsert("local", {Cpu(4), Cpu(1), true});  // room here now
  f.view.Upsert("far", {Cpu(8), Cpu(8), true});
  CHECK(f.Route({.placement = Cpu(1), .grant_or_reject = true}).kind ==
        LeaseRouteKind::kGrantHere);
}

TEST_CASE("a spillback target without a known address is run here instead") {
  // Invariant: the router never names a node the requester could not reach.
  Fixture f;
  f.addressed.erase("far");
  CHECK(f.Route({.placement = Cpu(6)}).kind == LeaseRouteKind::kGrantHere);
}

TEST_CASE("placement-group requests follow their bundles") {
  // Invariant: a group's request runs only in one of its bundles: here when a
  // committed bundle here can hold it, else at the bundle's node; it waits while
  // the group is unplaced and fails once the group is removed or too small.
  Fixture f;
  LeaseRouteRequest request{.placement = Cpu(1), .group = "g", .name = "member"};

  SECTION("not placed yet: parked, not infeasible") {
    LeaseRoute r = f.Route(request);
    CHECK(r.kind == LeaseRouteKind::kPark);
    CHECK_FALSE(r.infeasible);
  }
  SECTION("committed here: granted here") {
    f.reserved["g/0"] = ReservedBundle{std::make_unique<LocalResourceManager>(Cpu(2)), true};
    f.placements["g/0"] = BundlePlacement{"local", Cpu(2)};
    CHECK(f.Route(request).kind == LeaseRouteKind::kGrantHere);
  }
  SECTION("prepared but not committed here: parked") {
    f.reserved["g/0"] = ReservedBundle{std::make_unique<LocalResourceManager>(Cpu(2)), false};
    CHECK(f.Route(request).kind == LeaseRouteKind::kPark);
  }
  SECTION("on another node: spilled there") {
    f.placements["g/1"] = BundlePlacement{"far", Cpu(2)};
    LeaseRoute r = f.Route(request);
    REQUIRE(r.kind == LeaseRouteKind::kSpillback);
    CHECK(r.node_id == "far");
  }
  SECTION("bigger than every bundle: refused") {
    f.placements["g/1"] = BundlePlacement{"far", Cpu(2)};
    request.placement = Cpu(3);
    LeaseRoute r = f.Route(request);
    REQUIRE(r.kind == LeaseRouteKind::kRefuse);
    CHECK(r.error.find("more than its placement group bundle holds") != std::string::npos);
  }
  SECTION("a specific bundle index only matches that bundle") {
    f.placements["g/1"] = BundlePlacement{"far", Cpu(2)};
    request.bundle_index = 0;
    CHECK(f.Route(request).kind == LeaseRouteKind::kPark);
  }
  SECTION("removed: refused") {
    f.removed.insert("g");
    LeaseRoute r = f.Route(request);
    REQUIRE(r.kind == LeaseRouteKind::kRefuse);
    CHECK(r.error.find("was removed") != std::string::npos);
  }
  SECTION("forwarded for a bundle no longer here: sent back") {
    f.placements["g/1"] = BundlePlacement{"far", Cpu(2)};
    request.grant_or_reject = true;
    CHECK(f.Route(request).kind == LeaseRouteKind::kRetry);
  }
}

TEST_CASE("bundle keys name their group exactly") {
  // Invariant: group "g" does not match the bundles of group "g2".
  CHECK(IsBundleOf("g/0", "g", -1));
  CHECK(IsBundleOf("g/3", "g", 3));
  CHECK_FALSE(IsBundleOf("g/3", "g", 2));
  CHECK_FALSE(IsBundleOf("g2/0", "g", -1));
  CHECK(BundleKey("g", 7) == "g/7");
}

}  // namespace
}  // namespace lumen::scheduler
