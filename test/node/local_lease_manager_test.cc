// Deterministic tests of the node daemon's local lease manager and worker pool:
// a fake process launcher (no processes), fake lease clients that record every
// answer, a manual clock, and posted tasks run only when the test says so.
#include "core/node/local_lease_manager.h"

#include <chrono>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <capnp/message.h>
#include <catch2/catch.hpp>

#include "core/node/cluster_state.h"
#include "core/node/process_launcher.h"
#include "test/node/fake_process_launcher.h"
#include "core/node/worker_pool.h"
#include "lumen/common/proto_util.h"

namespace lumen::node {
namespace {

using scheduler::ResourceSet;

ResourceSet Make(const std::map<std::string, double>& m) {
  auto set = ResourceSet::FromMap(m);
  REQUIRE(set.ok());
  return *set;
}

using testing::FakeLauncher;  // test/node/fake_process_launcher.h

// Records what the lease manager answers, per client.
class FakeClients : public LeaseClients {
 public:
  struct Answer {
    std::string kind;  // "grant", "refuse", "spill", "retry", "waiting"
    uint64_t request_id = 0;
    std::string detail;
    LeaseGrant grant;
  };
  bool IsConnected(ClientId client) override { return !closed.contains(client); }
  void Grant(ClientId client, uint64_t request_id, const LeaseGrant& grant) override {
    answers[client].push_back({"grant", request_id, "", grant});
  }
  void Refuse(ClientId client, uint64_t request_id, const std::string& why) override {
    answers[client].push_back({"refuse", request_id, why, {}});
  }
  void Spillback(ClientId client, uint64_t request_id, const std::string& node) override {
    answers[client].push_back({"spill", request_id, node, {}});
  }
  void Retry(ClientId client, uint64_t request_id) override {
    answers[client].push_back({"retry", request_id, "", {}});
  }
  void Waiting(ClientId client, uint64_t request_id, const std::string& why) override {
    answers[client].push_back({"waiting", request_id, why, {}});
  }
  void Reclaim(ClientId holder) override { ++reclaims[holder]; }

  std::vector<Answer> Grants(ClientId client) {
    std::vector<Answer> out;
    for (const auto& a : answers[client]) {
      if (a.kind == "grant") out.push_back(a);
    }
    return out;
  }

  std::set<ClientId> closed;
  std::map<ClientId, std::vector<Answer>> answers;
  std::map<ClientId, int> reclaims;
};

// One node with `cpus` CPUs, one job, no prestarted workers.
struct Node {
  explicit Node(double cpus, size_t max_queued = 100)
      : pool(WorkerPoolOptions{.launcher = &launcher,
                               .pool_size = 0,
                               .idle_timeout = std::chrono::milliseconds(1000),
                               .now = [this] { return now; }}),
        leases(LocalLeaseManagerOptions{
            .total = Make({{"CPU", cpus}}),
            .pool = &pool,
            .clients = &clients,
            .cluster = &cluster,
            .max_queued_per_client = max_queued,
            .post = [this](const char*, std::function<void()> task) { posted.push_back(std::move(task)); }}) {
    cluster.view().Upsert("local", {Make({{"CPU", cpus}}), Make({{"CPU", cpus}}), true});
    pool.GetOrAddJob(job).exe_path = "/bin/driver";
  }

  // `grant_or_reject`: as if another node had spilled it here.
  void Submit(ClientId client, uint64_t request_id, double cpus, bool grant_or_reject = false) {
    LeaseRequest request;
    request.grant_or_reject = grant_or_reject;
    request.client = client;
    request.request_id = request_id;
    request.job = job;
    request.resources = Make({{"CPU", cpus}});
    request.placement = request.resources;
    request.placement_map = {{"CPU", cpus}};
    request.name = "task";
    leases.Submit(std::move(request));
  }

  // Every launched worker connects and says hello; the manager dispatches.
  void WorkersConnect() {
    for (const auto& launch : launcher.launched) {
      if (helloed.insert(launch.worker).second) {
        REQUIRE(pool.OnWorkerHello(launch.worker, next_conn++, "/tmp/w.sock").ok());
      }
    }
    leases.Dispatch();
  }

  void RunPosted() {
    auto tasks = std::exchange(posted, {});
    for (auto& task : tasks) task();
  }

  double FreeCpu() { return leases.resources().available().Get("CPU"); }

  std::chrono::steady_clock::time_point now{};
  FakeLauncher launcher;
  FakeClients clients;
  ClusterState cluster{"local"};
  JobId job = JobId::FromBinary(std::string(JobId::kSize, '\x01'));
  WorkerPool pool;
  LocalLeaseManager leases;
  std::vector<std::function<void()>> posted;
  std::set<WorkerId> helloed;
  uint64_t next_conn = 500;
};

TEST_CASE("a lease is granted once a worker of the job connects") {
  // Invariant: a grant names a worker of the requester's job that said hello,
  // and takes the lease's CPU from the node.
  Node node(2);
  node.Submit(/*client=*/1, /*request_id=*/7, 1);
  REQUIRE(node.launcher.launched.size() == 1);
  CHECK(node.clients.Grants(1).empty());  // no worker yet
  node.WorkersConnect();
  auto grants = node.clients.Grants(1);
  REQUIRE(grants.size() == 1);
  CHECK(grants[0].request_id == 7);
  CHECK(grants[0].grant.worker == node.launcher.launched[0].worker);
  CHECK(node.FreeCpu() == 1);
  CHECK(node.leases.num_leases() == 1);
  CHECK(node.leases.num_queued() == 0);
}

TEST_CASE("requests beyond the free CPUs queue until a lease is returned") {
  // Invariant: granted leases never hold more CPU than the node has; a queued
  // request is granted when a lease comes back, and its holder is asked to
  // give back idle leases while others wait.
  Node node(2);
  node.Submit(1, 1, 1);
  node.Submit(1, 2, 1);
  node.Submit(2, 3, 1);
  node.WorkersConnect();
  REQUIRE(node.clients.Grants(1).size() == 2);
  CHECK(node.clients.Grants(2).empty());
  CHECK(node.FreeCpu() == 0);
  CHECK(node.leases.num_queued() == 1);
  CHECK(node.clients.reclaims[1] == 1);  // asked once, not per pass

  uint64_t first = node.clients.Grants(1)[0].grant.lease_id;
  node.leases.ReturnLease(/*holder=*/1, first, /*kill=*/false);
  node.WorkersConnect();
  REQUIRE(node.clients.Grants(2).size() == 1);
  CHECK(node.FreeCpu() == 0);
  CHECK(node.leases.num_queued() == 0);
  // A returned lease's worker is reused, not killed.
  CHECK(node.launcher.killed.empty());
}

TEST_CASE("requests waiting for busy CPUs are pending demand grouped by shape, not infeasible") {
  // Invariant: what `lumen status` lists as pending is exactly the queued
  // requests (by name and shape, with their count); nothing there is called
  // infeasible, and granted ones leave it.
  Node node(2);
  node.Submit(1, 1, 1);
  node.Submit(1, 2, 1);
  node.WorkersConnect();
  REQUIRE(node.clients.Grants(1).size() == 2);
  CHECK(node.leases.PendingDemand().empty());
  node.Submit(2, 3, 1);
  node.Submit(2, 4, 1);
  node.Submit(3, 5, 2);
  auto pending = node.leases.PendingDemand();
  REQUIRE(pending.size() == 2);
  std::map<double, uint32_t> count_by_cpus;
  for (const auto& d : pending) {
    CHECK(d.name == "task");
    count_by_cpus[d.resources.at("CPU")] += d.count;
  }
  CHECK(count_by_cpus == std::map<double, uint32_t>{{1, 2}, {2, 1}});
  CHECK(node.leases.InfeasibleDemand().empty());

  node.leases.ReturnLease(1, node.clients.Grants(1)[0].grant.lease_id, /*kill=*/false);
  node.WorkersConnect();
  uint32_t left = 0;
  for (const auto& d : node.leases.PendingDemand()) left += d.count;
  CHECK(left == 2);
}

TEST_CASE("a lease returned by someone other than its holder is ignored") {
  // Invariant: only the holder ends a lease.
  Node node(1);
  node.Submit(1, 1, 1);
  node.WorkersConnect();
  uint64_t lease = node.clients.Grants(1).at(0).grant.lease_id;
  node.leases.ReturnLease(/*holder=*/2, lease, /*kill=*/true);
  CHECK(node.leases.num_leases() == 1);
  CHECK(node.launcher.killed.empty());
}

TEST_CASE("a lease returned twice ends once, and the repeat leaves the worker's next lease alone") {
  // Invariant (reliability item 9): returnLease and killLease name the lease,
  // whose id is never reused, so a repeated return or kill (a resend) ends
  // nothing more: not the same worker's next lease, not another lease.
  Node node(1);
  node.Submit(1, 1, 1);
  node.WorkersConnect();
  const auto first = node.clients.Grants(1).at(0).grant;
  node.leases.ReturnLease(1, first.lease_id, /*kill=*/false);
  CHECK(node.leases.num_leases() == 0);
  node.Submit(1, 2, 1);
  node.WorkersConnect();
  REQUIRE(node.clients.Grants(1).size() == 2);
  const auto second = node.clients.Grants(1).at(1).grant;
  CHECK(second.worker == first.worker);  // the same worker, reused
  CHECK(second.lease_id != first.lease_id);
  node.leases.ReturnLease(1, first.lease_id, /*kill=*/false);  // the repeat
  node.leases.ReturnLease(1, first.lease_id, /*kill=*/true);
  CHECK(node.leases.num_leases() == 1);
  CHECK(node.FreeCpu() == 0);
  CHECK(node.launcher.killed.empty());
}

TEST_CASE("a worker blocked in Get lends its CPU back until it unblocks") {
  // Invariant: while a leased worker is blocked its CPU is free for others (so
  // its children can run); on unblock it takes the CPU back only if free, and
  // a lease that ran oversubscribed gives back no CPU when it ends, so the
  // node's free CPU never exceeds its total.
  Node node(1);
  node.Submit(1, 1, 1);
  node.WorkersConnect();
  LeaseGrant parent = node.clients.Grants(1).at(0).grant;
  node.Submit(2, 2, 1);  // the parent's child task
  node.WorkersConnect();
  CHECK(node.clients.Grants(2).empty());

  node.leases.OnWorkerBlocked(parent.worker);
  node.WorkersConnect();
  REQUIRE(node.clients.Grants(2).size() == 1);
  LeaseGrant child = node.clients.Grants(2)[0].grant;
  CHECK(node.FreeCpu() == 0);

  node.leases.OnWorkerBlocked(parent.worker);  // a repeat changes nothing
  CHECK(node.FreeCpu() == 0);
  node.leases.OnWorkerUnblocked(parent.worker);  // its CPU is taken: oversubscribed
  CHECK(node.FreeCpu() == 0);
  node.leases.ReturnLease(1, parent.lease_id, false);
  CHECK(node.FreeCpu() == 0);  // the parent's CPU was the child's
  node.leases.ReturnLease(2, child.lease_id, false);
  CHECK(node.FreeCpu() == 1);
}

TEST_CASE("unblocking takes the CPU back when it is free") {
  // Invariant: a blocked-then-unblocked lease with its CPU back returns it once.
  Node node(1);
  node.Submit(1, 1, 1);
  node.WorkersConnect();
  LeaseGrant lease = node.clients.Grants(1).at(0).grant;
  node.leases.OnWorkerBlocked(lease.worker);
  CHECK(node.FreeCpu() == 1);
  node.leases.OnWorkerUnblocked(lease.worker);
  CHECK(node.FreeCpu() == 0);
  node.leases.ReturnLease(1, lease.lease_id, false);
  CHECK(node.FreeCpu() == 1);
}

TEST_CASE("a client that disconnects with queued leases frees its slots and its leases") {
  // Invariant: a client's queued requests count against its cap until they
  // leave the queue; when it disconnects, its queued requests are dropped
  // (never granted later), its leases end and their workers are killed (they
  // may still run its tasks), and the CPU goes to the next client.
  Node node(1, /*max_queued=*/2);
  node.Submit(1, 1, 1);
  node.WorkersConnect();
  LeaseGrant held = node.clients.Grants(1).at(0).grant;
  node.Submit(1, 2, 1);
  node.Submit(1, 3, 1);
  CHECK(node.leases.queued_of(1) == 2);
  node.Submit(1, 4, 1);  // over the cap
  REQUIRE(node.clients.answers[1].back().kind == "refuse");
  CHECK(node.clients.answers[1].back().detail.find("LUMEN_MAX_QUEUED_LEASES_PER_CLIENT") !=
        std::string::npos);
  node.Submit(2, 5, 1);  // another client waits too

  node.clients.closed.insert(1);
  node.leases.OnClientClosed(1);
  node.leases.Dispatch();
  CHECK(node.leases.queued_of(1) == 0);
  CHECK(node.launcher.killed == std::set<pid_t>{held.worker_pid});
  CHECK(node.FreeCpu() == 1);
  // The killed worker is no longer idle: the other client gets a fresh one.
  node.WorkersConnect();
  REQUIRE(node.clients.Grants(2).size() == 1);
  CHECK(node.clients.Grants(2)[0].grant.worker != held.worker);
  CHECK(node.clients.Grants(1).size() == 1);  // nothing more for the gone client
  CHECK(node.leases.num_queued() == 0);
}

TEST_CASE("a detached actor's lease outlives its holder") {
  // Invariant: a detached lease is orphaned, not ended, when its holder leaves.
  Node node(1);
  LeaseRequest request;
  request.client = 1;
  request.request_id = 1;
  request.job = node.job;
  request.resources = Make({{"CPU", 1}});
  request.placement = request.resources;
  request.detached = true;
  node.leases.Submit(std::move(request));
  node.WorkersConnect();
  LeaseGrant lease = node.clients.Grants(1).at(0).grant;
  node.clients.closed.insert(1);
  node.leases.OnClientClosed(1);
  CHECK(node.leases.num_leases() == 1);
  CHECK(node.launcher.killed.empty());
  CHECK(node.leases.IsDetached(*node.pool.Find(lease.worker)));
}

TEST_CASE("a worker that dies frees its lease's resources") {
  // Invariant: a reaped leased worker's CPU goes back to the node.
  Node node(1);
  node.Submit(1, 1, 1);
  node.WorkersConnect();
  LeaseGrant lease = node.clients.Grants(1).at(0).grant;
  auto gone = node.pool.OnProcessExit({lease.worker_pid, /*wait_status=*/9});
  REQUIRE(gone.has_value());
  CHECK(gone->exit.cause == "killed by SIGKILL (possibly the out-of-memory killer)");
  CHECK(gone->exit.signal == 9);
  node.leases.OnWorkerGone(gone->worker, gone->job_start_failed, gone->exit.cause);
  CHECK(node.leases.num_leases() == 0);
  CHECK(node.FreeCpu() == 1);
}

TEST_CASE("workers that keep failing to start fail the job's requests") {
  // Invariant: after WorkerPool::kMaxFailedStarts launch failures in a row the
  // job's queued requests are refused (posted, outside the dispatch pass), with
  // a message that names the likely cause.
  Node node(1);
  node.launcher.fail = true;
  node.Submit(1, 1, 1);
  for (int i = 1; i < WorkerPool::kMaxFailedStarts; ++i) node.leases.Dispatch();
  CHECK(node.clients.answers[1].empty());
  REQUIRE(node.posted.size() == 1);
  node.RunPosted();
  REQUIRE(node.clients.answers[1].size() == 1);
  CHECK(node.clients.answers[1][0].kind == "refuse");
  CHECK(node.clients.answers[1][0].detail.find("lumen::Init") != std::string::npos);
  CHECK(node.leases.num_queued() == 0);
}

TEST_CASE("surplus idle workers exit after the idle timeout, longest idle first") {
  // Invariant: the pool keeps pool_size idle workers per job; others are
  // killed only once idle for the whole idle timeout (manual clock).
  Node node(2);
  node.Submit(1, 1, 1);
  node.Submit(1, 2, 1);
  node.WorkersConnect();
  for (const auto& g : node.clients.Grants(1)) node.leases.ReturnLease(1, g.grant.lease_id, false);
  CHECK(node.pool.num_idle() == 2);
  node.now += std::chrono::milliseconds(999);
  node.pool.ReapIdle();
  CHECK(node.launcher.killed.empty());
  node.now += std::chrono::milliseconds(1);
  node.pool.ReapIdle();
  CHECK(node.launcher.killed.size() == 2);
  CHECK(node.pool.num_idle() == 0);
}

// Client 1's request 1 for one CPU of `group`'s bundles.
LeaseRequest OneCpuInGroup(const JobId& job, const std::string& group) {
  LeaseRequest request;
  request.client = 1;
  request.request_id = 1;
  request.job = job;
  request.resources = Make({{"CPU", 1}});
  request.placement = request.resources;
  request.group = group;
  return request;
}

TEST_CASE("placement-group bundles are reserved all or none") {
  // Invariant: a prepare that cannot reserve every bundle leaves the node's
  // resources as they were; a committed bundle serves its group's leases only.
  Node node(2);
  auto status = node.leases.PrepareBundles("g", {{0, Make({{"CPU", 1}})}, {1, Make({{"CPU", 2}})}});
  CHECK(status.code() == absl::StatusCode::kResourceExhausted);
  CHECK(node.FreeCpu() == 2);
  REQUIRE(node.leases.PrepareBundles("g", {{0, Make({{"CPU", 1}})}}).ok());
  CHECK(node.FreeCpu() == 1);
  REQUIRE(node.leases.CommitBundles("g", {0}).ok());
  node.leases.Submit(OneCpuInGroup(node.job, "g"));
  node.WorkersConnect();
  REQUIRE(node.clients.Grants(1).size() == 1);
  CHECK(node.FreeCpu() == 1);  // from the bundle, not the node
  node.leases.RemoveGroup("g");
  CHECK(node.FreeCpu() == 2);
  CHECK(node.leases.num_leases() == 0);
  CHECK(node.launcher.killed.size() == 1);  // what ran in it ends
}

TEST_CASE("a prepare with commit (a group on this node alone) commits all or none in one step") {
  // Invariant: PrepareBundles(commit=true) that cannot reserve every bundle
  // leaves nothing reserved and nothing committed; one that can leaves every
  // bundle committed: the group's leases are served with no CommitBundles.
  Node node(2);
  auto refused = node.leases.PrepareBundles(
      "h", {{0, Make({{"CPU", 1}})}, {1, Make({{"CPU", 2}})}}, /*commit=*/true);
  CHECK(refused.code() == absl::StatusCode::kResourceExhausted);
  CHECK(node.FreeCpu() == 2);
  REQUIRE(node.leases.PrepareBundles("h", {{0, Make({{"CPU", 1}})}}, /*commit=*/true).ok());
  CHECK(node.FreeCpu() == 1);
  node.leases.Submit(OneCpuInGroup(node.job, "h"));
  node.WorkersConnect();
  CHECK(node.clients.Grants(1).size() == 1);  // committed: usable by its leases
  node.leases.RemoveGroup("h");
  CHECK(node.FreeCpu() == 2);
}

TEST_CASE("a dispatch pass looks at each class of queued requests once, not at every request") {
  // Invariant: requests of one shape and job are equivalent, so while the
  // node is full each dispatch looks at the front of their class only: Q
  // queued requests and E events cost O(Q + E) looks, not O(Q x E) (the old
  // pass went over the whole queue on every event, and every new request
  // summed the queue's placements: 20,000 queued requests made 2e8 looks).
  // Counted, not timed. Granting stays first come, first served.
  constexpr int kQueued = 20000, kEvents = 1000;
  Node node(1, /*max_queued=*/kQueued + 10);
  node.Submit(1, 0, 1);
  node.WorkersConnect();
  REQUIRE(node.clients.Grants(1).size() == 1);
  for (int i = 1; i <= kQueued; ++i) node.Submit(2, static_cast<uint64_t>(i), 1);
  for (int i = 0; i < kEvents; ++i) node.leases.Dispatch();
  CHECK(node.leases.num_queued() == kQueued);
  CHECK(node.leases.TEST_dispatch_visits() <= 3u * (kQueued + kEvents));

  // Leases come back one at a time: the oldest requests are granted, in order.
  LeaseGrant held = node.clients.Grants(1)[0].grant;
  node.leases.ReturnLease(1, held.lease_id, false);
  for (int i = 1; i <= 50; ++i) {
    auto grants = node.clients.Grants(2);
    REQUIRE(grants.size() == static_cast<size_t>(i));
    CHECK(grants.back().request_id == static_cast<uint64_t>(i));
    node.leases.ReturnLease(2, grants.back().grant.lease_id, false);
  }
  CHECK(node.leases.num_queued() == kQueued - 51);  // the 51st took the last one returned
  CHECK(node.leases.TEST_dispatch_visits() <= 3u * (kQueued + kEvents + 100));
}

TEST_CASE("queued requests of different shapes are granted oldest first as they fit") {
  // Invariant: a pass goes over the classes by the age of their front: when
  // two requests fit, the older goes first; a request that fits is granted
  // even while an older one of another shape cannot be (first fit).
  Node node(2);
  node.Submit(2, 2, 2);
  node.Submit(4, 4, 1);  // both fit the free CPUs; no worker yet
  node.WorkersConnect();
  REQUIRE(node.clients.Grants(2).size() == 1);  // the older took both CPUs
  CHECK(node.clients.Grants(4).empty());
  node.leases.ReturnLease(2, node.clients.Grants(2)[0].grant.lease_id, false);
  REQUIRE(node.clients.Grants(4).size() == 1);

  node.Submit(5, 5, 2);  // waits: 1 CPU free
  node.Submit(6, 6, 1);  // fits now
  node.WorkersConnect();
  CHECK(node.clients.Grants(5).empty());
  REQUIRE(node.clients.Grants(6).size() == 1);
  CHECK(node.leases.num_queued() == 1);
}

// A cluster view from the head naming one other node, "far".
void ApplyView(ClusterState& cluster, double far_cpus, bool far_alive) {
  capnp::MallocMessageBuilder message;
  auto view = message.initRoot<proto::ClusterView>();
  auto nodes = view.initNodes(1);
  std::string far = "far";
  nodes[0].setNodeId(capnp::Data::Reader(reinterpret_cast<const uint8_t*>(far.data()), far.size()));
  nodes[0].setAddress("10.0.0.2:7000");
  nodes[0].setAlive(far_alive);
  std::map<std::string, double> cpus{{"CPU", far_cpus}};
  SetResources(nodes[0].initTotal(1), cpus);
  SetResources(nodes[0].initAvailable(1), cpus);
  cluster.Apply(view.asReader());
}

TEST_CASE("an infeasible request waits parked and spills once a node that fits joins") {
  // Invariant: a request no node can run is answered "waiting" once, counted
  // as infeasible demand and against its client's cap, and routed again when
  // the cluster changes (here: spilled to the new node that fits it).
  Node node(1);
  node.Submit(1, 9, 4);
  REQUIRE(node.clients.answers[1].size() == 1);
  CHECK(node.clients.answers[1][0].kind == "waiting");
  CHECK(node.leases.queued_of(1) == 1);
  auto demand = node.leases.InfeasibleDemand();
  REQUIRE(demand.size() == 1);
  CHECK(demand[0].count == 1);

  node.leases.ReplayParked();  // nothing changed: still parked, not re-announced
  CHECK(node.clients.answers[1].size() == 1);
  CHECK(node.leases.queued_of(1) == 1);

  ApplyView(node.cluster, 8, true);
  node.leases.ReplayParked();
  REQUIRE(node.clients.answers[1].size() == 2);
  CHECK(node.clients.answers[1][1].kind == "spill");
  CHECK(node.clients.answers[1][1].detail == "far");
  CHECK(node.leases.queued_of(1) == 0);
  CHECK(node.leases.num_queued() == 0);
}

TEST_CASE("a node whose store is nearly full spills work to a node with room") {
  // Invariant: the lease manager refreshes our resources in the view before
  // routing but keeps our store use (from our own report, echoed in the
  // head's view), so DEFAULT sends a request that fits here elsewhere while
  // our store is nearly full, and keeps it here once the store has room.
  Node node(4);
  ApplyView(node.cluster, 4, true);
  auto self_store = [&](uint64_t used) {
    capnp::MallocMessageBuilder message;
    auto nodes = message.initRoot<proto::ClusterView>().initNodes(1);
    std::string self = "local";
    nodes[0].setNodeId(
        capnp::Data::Reader(reinterpret_cast<const uint8_t*>(self.data()), self.size()));
    nodes[0].setAlive(true);
    nodes[0].setStoreUsed(used);
    nodes[0].setStoreCapacity(1000);
    node.cluster.Apply(message.getRoot<proto::ClusterView>().asReader());
  };
  self_store(900);
  node.Submit(1, 1, 1);
  REQUIRE(node.clients.answers[1].size() == 1);
  CHECK(node.clients.answers[1][0].kind == "spill");
  CHECK(node.clients.answers[1][0].detail == "far");
  CHECK(node.cluster.view().Find("local")->store_used == 900);  // kept by Route

  self_store(100);
  node.Submit(1, 2, 1);
  CHECK(node.clients.answers[1].size() == 1);  // queued here, not spilled
  CHECK(node.leases.num_queued() == 1);
}

TEST_CASE("a spilled request finding this node's CPUs taken goes back while another node has room") {
  // Invariant: a request another node spilled here is not queued behind CPUs
  // that leases and queued requests already hold while the view shows a node
  // with room now (the sender's view of us was stale): the requester is told
  // to retry at its own node. With no room anywhere it queues here. (Before
  // the fix it always queued here: a barrier of 6 tasks on 3 2-CPU nodes
  // once never met, the third task sent to a full node.)
  Node node(2);
  auto far_view = [&](double available) {
    capnp::MallocMessageBuilder message;
    auto nodes = message.initRoot<proto::ClusterView>().initNodes(1);
    std::string far = "far";
    nodes[0].setNodeId(
        capnp::Data::Reader(reinterpret_cast<const uint8_t*>(far.data()), far.size()));
    nodes[0].setAddress("10.0.0.2:7000");
    nodes[0].setAlive(true);
    SetResources(nodes[0].initTotal(1), {{"CPU", 2}});
    SetResources(nodes[0].initAvailable(1), {{"CPU", available}});
    node.cluster.Apply(message.getRoot<proto::ClusterView>().asReader());
  };
  far_view(1);
  node.Submit(1, 1, 1, /*grant_or_reject=*/true);
  node.Submit(1, 2, 1, /*grant_or_reject=*/true);
  CHECK(node.leases.num_queued() == 2);  // both fit here now (workers starting)
  node.Submit(1, 3, 1, /*grant_or_reject=*/true);
  REQUIRE(node.clients.answers[1].size() == 1);
  CHECK(node.clients.answers[1][0].kind == "retry");
  CHECK(node.clients.answers[1][0].request_id == 3);
  CHECK(node.leases.num_queued() == 2);

  far_view(0);  // no room anywhere now: it waits here for a CPU
  node.Submit(1, 4, 1, /*grant_or_reject=*/true);
  CHECK(node.clients.answers[1].size() == 1);
  CHECK(node.leases.num_queued() == 3);
}

TEST_CASE("the cluster state reports a node's death once and bounds what it remembers") {
  // Invariant: a node is reported dead on its alive -> dead transition only;
  // ended jobs are remembered up to kRememberedIds, oldest forgotten first.
  ClusterState cluster("local");
  ApplyView(cluster, 2, true);
  capnp::MallocMessageBuilder message;
  auto view = message.initRoot<proto::ClusterView>();
  auto nodes = view.initNodes(1);
  std::string far = "far";
  nodes[0].setNodeId(capnp::Data::Reader(reinterpret_cast<const uint8_t*>(far.data()), far.size()));
  nodes[0].setAlive(false);
  auto changes = cluster.Apply(view.asReader());
  CHECK(changes.died == std::vector<std::string>{"far"});
  CHECK(cluster.Apply(view.asReader()).died.empty());

  RecentSet<int> recent(3);
  for (int i = 0; i < 5; ++i) CHECK(recent.Insert(i));
  CHECK_FALSE(recent.Insert(4));
  CHECK(recent.size() == 3);
  CHECK_FALSE(recent.Contains(1));
  CHECK(recent.Contains(2));
}

TEST_CASE("one dispatch pass starts a bounded number of workers and posts the rest") {
  // Invariant: with many requests waiting for workers, a dispatch pass starts
  // at most kMaxStartsPerPass worker processes (each is a fork of the daemon
  // on its loop, dearer the more workers it has) and posts one dispatch that
  // starts more; over the posted passes the job still gets its 64 starting
  // workers, and every request is granted once they connect. Counted, not timed.
  constexpr size_t kPerPass = LocalLeaseManager::kMaxStartsPerPass;
  Node node(100, /*max_queued=*/1000);
  node.leases.set_grants_paused(true);  // 100 requests queue before any pass
  for (int i = 1; i <= 100; ++i) node.Submit(1, static_cast<uint64_t>(i), 1);
  CHECK(node.launcher.launched.empty());
  node.leases.set_grants_paused(false);
  node.leases.Dispatch();
  CHECK(node.launcher.launched.size() == kPerPass);
  REQUIRE(node.posted.size() == 1);  // one continuation, not one per pass
  node.leases.Dispatch();
  CHECK(node.launcher.launched.size() == 2 * kPerPass);
  CHECK(node.posted.size() == 1);
  for (int handler = 0; handler < 20 && !node.posted.empty(); ++handler) {
    const size_t before = node.launcher.launched.size();
    node.RunPosted();
    CHECK(node.launcher.launched.size() - before <= kPerPass);
  }
  CHECK(node.posted.empty());
  CHECK(node.launcher.launched.size() == 64);  // the cap on workers starting at once
  for (int round = 0; round < 10 && node.clients.Grants(1).size() < 100; ++round) {
    node.WorkersConnect();
    for (int handler = 0; handler < 20 && !node.posted.empty(); ++handler) node.RunPosted();
  }
  CHECK(node.clients.Grants(1).size() == 100);
  CHECK(node.leases.num_queued() == 0);
}

TEST_CASE("a lone holder's list of leases to reclaim stays bounded") {
  // Invariant: the ids of leases a holder may be asked to give back are
  // cleared only when another client waits; a single client taking and
  // returning leases (one driver's long run) keeps at most about twice the
  // leases it holds, not one id per lease ever granted.
  Node node(2, /*max_queued=*/100);
  node.Submit(1, 0, 1);
  node.WorkersConnect();
  for (uint64_t i = 1; i <= 5000; ++i) {
    const auto& last = node.clients.answers[1].back();
    REQUIRE(last.kind == "grant");
    REQUIRE(last.request_id == i - 1);
    node.leases.ReturnLease(1, last.grant.lease_id, false);
    node.Submit(1, i, 1);
  }
  CHECK(node.leases.num_leases() == 1);
  CHECK(node.leases.TEST_unasked_entries() <= 3);
}

}  // namespace
}  // namespace lumen::node
