// ClusterViewPublisher with a recording send function instead of connections:
// which changes each node's view carries. No processes, no sockets.
#include "core/head/cluster_view_publisher.h"

#include <capnp/message.h>

#include <chrono>
#include <memory>
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
    capnp::MallocMessageBuilder report;
    auto stats = report.initRoot<proto::NodeStats>();
    stats.setNodeId(DataOf(id));
    SetResources(stats.initTotal(1), {{"CPU", 4}});
    SetResources(stats.initAvailable(1), {{"CPU", 4}});
    nodes.Report(conn, stats.asReader(), NodeTable::Clock::time_point{});
    return id;
  }
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
  CHECK(f.LastView(1).getNodes().size() == 2);  // every node's report, every time

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

TEST_CASE("Committed bundles are in every view, dead nodes get none") {
  // Invariant: nodes replace their bundle table with each view, so every view
  // lists every created group's bundles; a dead node is sent nothing.
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
  f.views.Broadcast();
  CHECK(f.LastView(1).getBundles().size() == 1);
  CHECK(f.LastView(2).getBundles().size() == 1);

  REQUIRE(f.nodes.Leave(a, 1).size() == 1);
  f.views.Forget(a);
  size_t before = f.sent.size();
  f.views.Broadcast();
  CHECK(f.sent.size() == before + 1);  // only node 2
  CHECK(f.sent.back().first == 2);
}

}  // namespace
}  // namespace lumen::head
