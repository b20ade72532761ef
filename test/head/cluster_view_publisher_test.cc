// ClusterViewPublisher with a recording send function instead of connections:
// which changes each node's view carries. No processes, no sockets.
#include "core/head/cluster_view_publisher.h"

#include <capnp/message.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <random>
#include <tuple>
#include <set>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "lumen/common/proto_util.h"

namespace lumen::head {
namespace {

using namespace std::chrono_literals;

// Nodes that accept every bundle request; replies are delivered by the test.
class AcceptingNodes : public scheduler::BundleTransport {
 public:
  absl::Status Send(const scheduler::BundleRequest& r) override {
    if (r.ticket != 0) tickets.push_back(r.ticket);
    return absl::OkStatus();
  }
  std::vector<uint64_t> tickets;
};

struct Fixture {
  NodeTable nodes{NodeTable::Options{.health_check_period = 100ms, .failure_threshold = 5}};
  JobTable jobs;
  AcceptingNodes transport;
  scheduler::PlacementGroupManager groups{{.transport = &transport}};
  ChangeLog<std::string> removed{10};
  std::set<uint64_t> closed;  // connections whose sends fail
  // (connection, the view it got), in send order.
  std::vector<std::pair<uint64_t, std::unique_ptr<capnp::MallocMessageBuilder>>> sent;
  ClusterViewPublisher views{{.nodes = &nodes,
                              .jobs = &jobs,
                              .groups = &groups,
                              .removed_groups = &removed,
                              .send = [this](uint64_t conn, capnp::MessageBuilder& m) {
                                if (closed.contains(conn)) return false;
                                auto copy = std::make_unique<capnp::MallocMessageBuilder>();
                                copy->setRoot(m.getRoot<proto::Envelope>().asReader());
                                sent.emplace_back(conn, std::move(copy));
                                return true;
                              }}};

  NodeId Join(uint64_t conn) {
    NodeId id = NodeId::Random();
    Report(conn, id, 4);
    return id;
  }
  // A report of `id` on `conn` with `available` of its 4 CPUs free (and a
  // store use that changes with every report, which other nodes do not need).
  void Report(uint64_t conn, const NodeId& id, double available) {
    capnp::MallocMessageBuilder report;
    auto stats = report.initRoot<proto::NodeStats>();
    stats.setNodeId(DataOf(id));
    stats.setAddress("127.0.0.1:" + std::to_string(conn));
    stats.setStoreUsed(++reports);
    SetResources(stats.initTotal(1), {{"CPU", 4}});
    SetResources(stats.initAvailable(1), {{"CPU", available}});
    nodes.Report(conn, stats.asReader(), NodeTable::Clock::time_point{});
  }
  uint64_t reports = 0;
  // The last view sent on `conn`.
  proto::ClusterView::Reader LastView(uint64_t conn) {
    for (auto it = sent.rbegin(); it != sent.rend(); ++it) {
      if (it->first == conn) return it->second->getRoot<proto::Envelope>().asReader().getClusterView();
    }
    FAIL("no view sent on connection " << conn);
    return {};
  }
  std::vector<JobId> EndedJobs(uint64_t conn) {
    std::vector<JobId> out;
    for (auto j : LastView(conn).getEndedJobs()) out.push_back(IdFrom<JobId>(j));
    return out;
  }
  std::vector<std::string> Removed(uint64_t conn) {
    std::vector<std::string> out;
    for (auto g : LastView(conn).getRemovedGroups()) {
      out.emplace_back(reinterpret_cast<const char*>(g.begin()), g.size());
    }
    return out;
  }
};

TEST_CASE("Each node's view carries each ended job and removed group once") {
  // Invariant: the view does not grow with the cluster's history: a change is
  // sent to a node in exactly one view, and a node that joins later gets every
  // change still retained.
  Fixture f;
  f.Join(1);
  NodeId b = f.Join(2);
  JobId j1 = JobId::Random(), j2 = JobId::Random();
  REQUIRE(f.jobs.End(j1));
  CHECK_FALSE(f.jobs.End(j1));
  f.views.Broadcast();
  CHECK(f.EndedJobs(1) == std::vector<JobId>{j1});
  CHECK(f.EndedJobs(2) == std::vector<JobId>{j1});
  f.views.Broadcast();
  CHECK(f.EndedJobs(1).empty());
  CHECK(f.LastView(1).getNodes().size() == 0);  // nothing changed since the last view

  f.jobs.End(j2);
  f.removed.Append("g1");
  f.views.SendTo(b);
  CHECK(f.EndedJobs(2) == std::vector<JobId>{j2});
  CHECK(f.Removed(2) == std::vector<std::string>{"g1"});
  f.views.Broadcast();
  CHECK(f.EndedJobs(1) == std::vector<JobId>{j2});
  CHECK(f.Removed(1) == std::vector<std::string>{"g1"});
  CHECK(f.EndedJobs(2).empty());
  CHECK(f.Removed(2).empty());

  f.Join(3);
  f.views.Broadcast();
  CHECK(f.EndedJobs(3) == std::vector<JobId>{j1, j2});
  CHECK(f.Removed(3) == std::vector<std::string>{"g1"});
}

TEST_CASE("A view that could not be sent leaves its changes for the next one") {
  // Invariant: a node's position in the change logs advances only when a view
  // was actually sent to it.
  Fixture f;
  f.Join(1);
  JobId job = JobId::Random();
  f.jobs.End(job);
  f.closed.insert(1);
  f.views.Broadcast();
  CHECK(f.sent.empty());
  f.closed.clear();
  f.views.Broadcast();
  CHECK(f.EndedJobs(1) == std::vector<JobId>{job});
}

TEST_CASE("Committed bundles are sent when they change, dead nodes get no view") {
  // Invariant: a view lists every created group's bundles when the groups
  // changed since that node's previous view, else says bundlesUnchanged; a
  // dead node is sent nothing.
  Fixture f;
  NodeId a = f.Join(1);
  f.Join(2);
  REQUIRE(f.groups.Create("g", "g", scheduler::PlacementStrategy::kPack, {{{"CPU", 1}}}).ok());
  f.groups.Schedule(f.nodes.ResourceView());
  for (int phase = 0; phase < 2; ++phase) {
    auto tickets = std::move(f.transport.tickets);
    f.transport.tickets.clear();
    for (uint64_t t : tickets) f.groups.OnBundleReply(t, absl::OkStatus());
  }
  REQUIRE(f.groups.Find("g")->state == scheduler::GroupState::kCreated);
  f.views.Broadcast();
  CHECK(f.LastView(1).getBundles().size() == 1);
  CHECK_FALSE(f.LastView(1).getBundlesUnchanged());
  CHECK(f.LastView(2).getBundles().size() == 1);
  f.views.Broadcast();
  CHECK(f.LastView(1).getBundles().size() == 0);
  CHECK(f.LastView(1).getBundlesUnchanged());

  REQUIRE(f.nodes.Leave(a, 1).size() == 1);
  f.views.Forget(a);
  size_t before = f.sent.size();
  f.views.Broadcast();
  CHECK(f.sent.size() == before + 1);  // only node 2
  CHECK(f.sent.back().first == 2);
}

// What one node knows after applying its views in order, as a node daemon does
// (core/node/cluster_state.cc): nodes upserted, bundles replaced unless unchanged.
struct NodeSideModel {
  // node id -> (alive, free CPUs, address)
  std::map<std::string, std::tuple<bool, double, std::string>> nodes;
  std::map<std::pair<std::string, int>, std::string> bundles;  // (group, index) -> node

  void Apply(proto::ClusterView::Reader view) {
    for (auto n : view.getNodes()) {
      nodes[StringOf(n.getNodeId())] = {n.getAlive(), ReadResources(n.getAvailable())["CPU"],
                                        n.getAddress().cStr()};
    }
    if (view.getBundlesUnchanged()) {
      CHECK(view.getBundles().size() == 0);
      return;
    }
    bundles.clear();
    for (auto b : view.getBundles()) {
      bundles[{StringOf(b.getGroupId()), b.getIndex()}] = StringOf(b.getNodeId());
    }
  }
};

// The full view a node should end up with.
NodeSideModel Truth(Fixture& f) {
  capnp::MallocMessageBuilder message;
  auto view = message.initRoot<proto::ClusterView>();
  f.nodes.FillNodes(view.initNodes(f.nodes.size()));
  NodeSideModel truth;
  truth.Apply(view.asReader());
  for (const auto& [gid, g] : f.groups.groups()) {
    if (g.state != scheduler::GroupState::kCreated) continue;
    for (size_t k = 0; k < g.nodes.size(); ++k) truth.bundles[{gid, static_cast<int>(k)}] = g.nodes[k];
  }
  return truth;
}

// Drives a created group through both phases with every node accepting.
void CreateGroup(Fixture& f, const std::string& id) {
  if (!f.groups.Create(id, id, scheduler::PlacementStrategy::kPack, {{{"CPU", 1}}}).ok()) return;
  f.groups.Schedule(f.nodes.ResourceView());
  for (int phase = 0; phase < 2; ++phase) {
    auto tickets = std::move(f.transport.tickets);
    f.transport.tickets.clear();
    for (uint64_t t : tickets) f.groups.OnBundleReply(t, absl::OkStatus());
  }
}

TEST_CASE("A round of views costs O(changes), not O(nodes) per node") {
  // Invariant (issue 17, the head's O(N^2) broadcast): after a node's first
  // view, its views carry only the nodes that changed since its previous one;
  // reports that change nothing other nodes use (store use, counters) are not
  // changes; bundles are not resent while the groups stay the same.
  Fixture f;
  constexpr uint64_t kNodes = 100;
  std::vector<NodeId> ids;
  for (uint64_t c = 1; c <= kNodes; ++c) ids.push_back(f.Join(c));
  CreateGroup(f, "g");
  f.views.Broadcast();
  for (uint64_t c = 1; c <= kNodes; ++c) {
    REQUIRE(f.LastView(c).getNodes().size() == kNodes);  // the first view: everything
    REQUIRE(f.LastView(c).getBundles().size() == 1);
  }
  // Entries (nodes + bundles) in the views of one round: each node reports
  // and is answered, as the head does.
  auto round = [&](auto&& between) {
    f.sent.clear();
    between();
    size_t entries = 0;
    for (uint64_t c = 1; c <= kNodes; ++c) {
      f.Report(c, ids[c - 1], f.nodes.Find(ids[c - 1])->available.at("CPU"));
      f.views.SendTo(ids[c - 1]);
      auto view = f.LastView(c);
      entries += view.getNodes().size() + view.getBundles().size();
      CHECK(view.getBundlesUnchanged());
    }
    REQUIRE(f.sent.size() == kNodes);
    return entries;
  };
  CHECK(round([] {}) == 0);  // an idle round sends no node at all
  // One node's resources change: each view carries that one node.
  CHECK(round([&] { f.Report(8, ids[7], 3); }) == kNodes);
  CHECK(f.LastView(1).getNodes()[0].getAvailable()[0].getQuantity() == 3);
  CHECK(round([] {}) == 0);
  // Two nodes leave: each view carries the two, marked dead.
  size_t entries = 0;
  for (int k : {10, 20}) {
    REQUIRE(f.nodes.Leave(ids[k], k + 1).size() == 1);
    f.views.Forget(ids[k]);
  }
  f.sent.clear();
  f.views.Broadcast();
  for (const auto& [conn, message] : f.sent) {
    auto view = message->getRoot<proto::Envelope>().asReader().getClusterView();
    entries += view.getNodes().size();
    for (auto n : view.getNodes()) CHECK_FALSE(n.getAlive());
  }
  CHECK(f.sent.size() == kNodes - 2);
  CHECK(entries == 2 * (kNodes - 2));
}

TEST_CASE("Views applied in order converge to the full view (seeded random sequence)") {
  // Invariant: whatever happens in between (joins, resource changes, deaths,
  // groups created and removed, sends that fail on closed connections), a node
  // that applies its views in order, upserting nodes and replacing bundles
  // unless unchanged, knows what a full view would tell it.
  for (uint32_t seed : {1u, 2u, 3u, 17u, 2026u}) {
    CAPTURE(seed);
    Fixture f;
    std::mt19937 rng(seed);
    std::vector<NodeId> ids;      // conn = index + 1
    std::vector<bool> alive;
    int groups = 0;
    auto pick_alive = [&]() -> int {
      std::vector<int> live;
      for (size_t i = 0; i < ids.size(); ++i) if (alive[i]) live.push_back(static_cast<int>(i));
      if (live.empty()) return -1;
      return live[rng() % live.size()];
    };
    for (int step = 0; step < 1500; ++step) {
      switch (rng() % 9) {
        case 0:
          if (std::count(alive.begin(), alive.end(), true) < 12) {
            ids.push_back(f.Join(ids.size() + 1));
            alive.push_back(true);
            f.views.Broadcast();  // the head does on a join
          }
          break;
        case 1:
        case 2:
          if (int i = pick_alive(); i >= 0) {
            f.Report(i + 1, ids[i], static_cast<double>(rng() % 5));
            f.views.SendTo(ids[i]);
          }
          break;
        case 3:
          if (int i = pick_alive(); i >= 0 && rng() % 4 == 0 &&
                                      std::count(alive.begin(), alive.end(), true) > 3) {
            REQUIRE(f.nodes.Leave(ids[i], i + 1).size() == 1);
            alive[i] = false;
            f.views.Forget(ids[i]);
            f.groups.OnNodeDead(std::string(ids[i].Binary()));
            f.views.Broadcast();
          }
          break;
        case 4:
          CreateGroup(f, "g" + std::to_string(groups++));
          if (rng() % 2 == 0) f.views.Broadcast();
          break;
        case 5:
          if (groups > 0) {
            std::string g = "g" + std::to_string(rng() % groups);
            if (f.groups.Remove(g)) f.removed.Append(g);
          }
          break;
        case 6:
          if (!ids.empty()) {
            uint64_t conn = rng() % ids.size() + 1;
            if (!f.closed.erase(conn)) f.closed.insert(conn);
          }
          break;
        case 7:
          f.jobs.End(JobId::Random());
          break;
        default:
          f.views.Broadcast();
      }
    }
    f.closed.clear();
    f.views.Broadcast();
    NodeSideModel truth = Truth(f);
    std::map<uint64_t, NodeSideModel> known;
    for (const auto& [conn, message] : f.sent) {
      known[conn].Apply(message->getRoot<proto::Envelope>().asReader().getClusterView());
    }
    size_t checked = 0;
    for (size_t i = 0; i < ids.size(); ++i) {
      if (!alive[i]) continue;
      ++checked;
      CHECK(known[i + 1].nodes == truth.nodes);
      CHECK(known[i + 1].bundles == truth.bundles);
    }
    CHECK(checked >= 3);
  }
}

}  // namespace
}  // namespace lumen::head
