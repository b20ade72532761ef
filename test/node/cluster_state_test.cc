// ClusterState::Apply with views built by hand: the head sends each node only
// what changed since its previous view (nodes to upsert; bundles, or
// bundlesUnchanged). No processes, no sockets.
#include "core/node/cluster_state.h"

#include <capnp/message.h>

#include <map>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "lumen/common/proto_util.h"

namespace lumen::node {
namespace {

struct NodeEntry {
  std::string id;
  double available = 4;
  bool alive = true;
  uint64_t store_used = 0;
  uint64_t store_capacity = 0;
};

// A view with `nodes` (4 CPUs each) and, unless `bundles_unchanged`, `bundles`
// ((group, index) -> node).
class View {
 public:
  View(const std::vector<NodeEntry>& nodes, bool bundles_unchanged,
       const std::map<std::pair<std::string, int>, std::string>& bundles = {}) {
    auto view = message_.initRoot<proto::ClusterView>();
    auto list = view.initNodes(nodes.size());
    for (size_t i = 0; i < nodes.size(); ++i) {
      list[i].setNodeId(BytesOf(nodes[i].id));
      list[i].setAddress("127.0.0.1:" + std::to_string(i + 1));
      list[i].setAlive(nodes[i].alive);
      SetResources(list[i].initTotal(1), {{"CPU", 4}});
      SetResources(list[i].initAvailable(1), {{"CPU", nodes[i].available}});
      list[i].setStoreUsed(nodes[i].store_used);
      list[i].setStoreCapacity(nodes[i].store_capacity);
    }
    view.setBundlesUnchanged(bundles_unchanged);
    auto blist = view.initBundles(bundles.size());
    size_t b = 0;
    for (const auto& [key, node] : bundles) {
      blist[b].setGroupId(BytesOf(key.first));
      blist[b].setIndex(key.second);
      blist[b].setNodeId(BytesOf(node));
      SetResources(blist[b].initResources(1), {{"CPU", 1}});
      ++b;
    }
  }
  proto::ClusterView::Reader get() { return message_.getRoot<proto::ClusterView>().asReader(); }

 private:
  capnp::MallocMessageBuilder message_;
};

double FreeCpus(ClusterState& state, const std::string& node) {
  const scheduler::NodeResources* n = state.view().Find(node);
  REQUIRE(n != nullptr);
  return n->available.Get("CPU");
}

TEST_CASE("A delta view upserts its nodes and keeps the others") {
  // Invariant: nodes absent from a view are as the previous views left them;
  // a node in it replaces what was known; one that turns dead is reported once.
  ClusterState state("self");
  View full({{"a"}, {"b"}, {"c"}}, false, {{{"g", 0}, "b"}});
  state.Apply(full.get());
  REQUIRE(state.view().nodes().size() == 3);

  View delta({{"b", 1}}, true);
  auto changes = state.Apply(delta.get());
  CHECK(changes.died.empty());
  CHECK(FreeCpus(state, "a") == 4);
  CHECK(FreeCpus(state, "b") == 1);
  CHECK(FreeCpus(state, "c") == 4);
  CHECK(state.AddressOf("c") == "127.0.0.1:3");
  REQUIRE(state.bundle_placements().size() == 1);  // bundlesUnchanged: kept
  CHECK(state.bundle_placements().begin()->second.node_id == "b");

  View death({{"c", 4, false}}, true);
  changes = state.Apply(death.get());
  CHECK(changes.died == std::vector<std::string>{"c"});
  CHECK_FALSE(state.view().Find("c")->alive);
  CHECK(state.view().Find("a")->alive);
  CHECK(state.Apply(View({}, true).get()).died.empty());  // reported once

  // A view with bundles replaces the table, an empty list included.
  state.Apply(View({}, false, {{{"h", 1}, "a"}}).get());
  REQUIRE(state.bundle_placements().size() == 1);
  CHECK(state.bundle_placements().begin()->second.node_id == "a");
  state.Apply(View({}, false).get());
  CHECK(state.bundle_placements().empty());
}

TEST_CASE("Local estimates between reports give way to the reported state with the next view") {
  // Invariant: a lease spilled to another node takes its resources off our
  // view until the next view; the head no longer resends unchanged nodes, so
  // the next view (even one without that node) puts the reported state back.
  ClusterState state("self");
  state.Apply(View({{"a"}, {"b"}}, false).get());
  auto cpu = scheduler::ResourceSet::FromMap({{"CPU", 3}});
  REQUIRE(cpu.ok());
  state.view().Subtract("a", *cpu);
  CHECK(FreeCpus(state, "a") == 1);
  state.Apply(View({}, true).get());  // nothing changed at the head
  CHECK(FreeCpus(state, "a") == 4);
  CHECK(FreeCpus(state, "b") == 4);

  state.view().Subtract("b", *cpu);
  state.Apply(View({{"b", 2}}, true).get());  // b reported a change meanwhile
  CHECK(FreeCpus(state, "b") == 2);
}

TEST_CASE("Store use from the view reaches the scheduler, ours without our resources") {
  // Invariant: the DEFAULT policy sees every node's store use as last
  // reported; our own entry takes only its store use from the view (the lease
  // manager keeps our resources), and our estimates of other nodes keep it.
  ClusterState state("self");
  auto self_total = scheduler::ResourceSet::FromMap({{"CPU", 8}});
  REQUIRE(self_total.ok());
  state.view().Upsert("self", {*self_total, *self_total, true});
  state.Apply(View({{"a", 4, true, 900, 1000}, {"self", 1, true, 850, 1000}}, false).get());

  const scheduler::NodeResources* a = state.view().Find("a");
  REQUIRE(a != nullptr);
  CHECK(a->store_used == 900);
  CHECK(a->store_capacity == 1000);
  CHECK(a->StoreNearlyFull());
  const scheduler::NodeResources* self = state.view().Find("self");
  REQUIRE(self != nullptr);
  CHECK(self->store_used == 850);
  CHECK(self->store_capacity == 1000);
  CHECK(FreeCpus(state, "self") == 8);  // not the view's 1
  CHECK(self->total.Get("CPU") == 8);

  // An estimate between views, then the reset, keep a's store use.
  auto cpu = scheduler::ResourceSet::FromMap({{"CPU", 3}});
  REQUIRE(cpu.ok());
  state.view().Subtract("a", *cpu);
  CHECK(state.view().Find("a")->store_used == 900);
  state.Apply(View({{"self", 1, true, 100, 1000}}, true).get());
  CHECK(state.view().Find("a")->store_used == 900);
  CHECK(FreeCpus(state, "a") == 4);
  CHECK(state.view().Find("self")->store_used == 100);
  CHECK_FALSE(state.view().Find("self")->StoreNearlyFull());
}

}  // namespace
}  // namespace lumen::node
