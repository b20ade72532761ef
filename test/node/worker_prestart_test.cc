// Deterministic tests of the node's prestarted worker pool as actors use it:
// a fake process launcher (no processes), fake lease clients that record the
// grants, and posted tasks (the background refill) run only when the test says so.
#include <algorithm>
#include <chrono>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "core/node/cluster_state.h"
#include "core/node/local_lease_manager.h"
#include "core/node/process_launcher.h"
#include "test/node/fake_process_launcher.h"
#include "core/node/worker_pool.h"

namespace lumen::node {
namespace {

using scheduler::ResourceSet;

ResourceSet Cpus(double cpus) {
  auto set = ResourceSet::FromMap({{"CPU", cpus}});
  REQUIRE(set.ok());
  return *set;
}

using testing::FakeLauncher;  // test/node/fake_process_launcher.h

// Records grants; everything else only counts.
class FakeClients : public LeaseClients {
 public:
  bool IsConnected(ClientId) override { return true; }
  void Grant(ClientId, uint64_t request_id, const LeaseGrant& grant) override {
    grants[request_id] = grant;
  }
  void Refuse(ClientId, uint64_t request_id, const std::string&) override {
    refused.insert(request_id);
  }
  void Spillback(ClientId, uint64_t, const std::string&) override {}
  void Retry(ClientId, uint64_t) override {}
  void Waiting(ClientId, uint64_t, const std::string&) override {}
  void Reclaim(ClientId) override {}

  std::map<uint64_t, LeaseGrant> grants;
  std::set<uint64_t> refused;
};

// One node with 2 CPUs, one local job whose driver connected, `pool_size`
// prestarted workers that all said hello.
struct Node {
  explicit Node(int pool_size)
      : pool(WorkerPoolOptions{.launcher = &launcher, .pool_size = pool_size}),
        leases(LocalLeaseManagerOptions{
            .total = Cpus(2),
            .pool = &pool,
            .clients = &clients,
            .cluster = &cluster,
            .post = [this](const char*, std::function<void()> task) { posted.push_back(std::move(task)); }}) {
    cluster.view().Upsert("local", {Cpus(2), Cpus(2), true});
    pool.GetOrAddJob(job).exe_path = "/bin/driver";
    // What the daemon does when the driver says hello.
    for (int i = 0; i < pool.pool_size(); ++i) {
      std::string why;
      REQUIRE(pool.StartWorker(job, &why));
    }
    WorkersConnect();
  }

  // An actor's creation (0 CPU held, as actors hold by default) or a task's (1 CPU).
  void Submit(uint64_t request_id, bool actor) {
    LeaseRequest request;
    request.client = 1;
    request.request_id = request_id;
    request.job = job;
    request.resources = actor ? ResourceSet() : Cpus(1);
    request.placement = Cpus(1);
    request.placement_map = {{"CPU", 1}};
    request.actor = actor;
    request.name = actor ? "actor A" : "task";
    leases.Submit(std::move(request));
  }

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

  FakeLauncher launcher;
  FakeClients clients;
  ClusterState cluster{"local"};
  JobId job = JobId::FromBinary(std::string(JobId::kSize, '\x02'));
  WorkerPool pool;
  LocalLeaseManager leases;
  std::vector<std::function<void()>> posted;
  std::set<WorkerId> helloed;
  uint64_t next_conn = 500;
};

TEST_CASE("an actor takes a prestarted worker and the pool refills in the background") {
  // Invariant: with an idle prestarted worker, an actor's lease is granted that
  // worker without launching a process; the refill launches one afterwards
  // (posted, not inside the grant), bringing idle + starting back to pool_size.
  Node node(2);
  REQUIRE(node.launcher.launched.size() == 2);
  REQUIRE(node.pool.num_idle() == 2);
  const WorkerId first = node.launcher.launched[0].worker;
  node.Submit(1, /*actor=*/true);
  REQUIRE(node.clients.grants.contains(1));
  CHECK(node.clients.grants[1].worker == first);
  CHECK(node.launcher.launched.size() == 2);  // granted without a launch
  CHECK(node.pool.num_launched() == 2);
  REQUIRE(node.posted.size() == 1);
  node.RunPosted();
  CHECK(node.launcher.launched.size() == 3);  // the refill
  CHECK(node.pool.jobs().at(node.job).starting == 1);
  node.RunPosted();  // nothing more is posted
  CHECK(node.launcher.launched.size() == 3);
  node.WorkersConnect();
  CHECK(node.pool.num_idle() == 2);
}

TEST_CASE("a task's lease does not refill the pool: its worker comes back") {
  // Invariant: refills follow actor takes only; a task's worker returns to the
  // idle list when its lease ends, so the pool is whole again without a launch.
  Node node(2);
  node.Submit(1, /*actor=*/false);
  REQUIRE(node.clients.grants.contains(1));
  CHECK(node.posted.empty());
  node.leases.ReturnLease(1, node.clients.grants[1].lease_id, /*kill=*/false);
  CHECK(node.pool.num_idle() == 2);
  CHECK(node.launcher.launched.size() == 2);
  CHECK(node.launcher.killed.empty());
}

TEST_CASE("an actor's worker is never handed to later work, even if its lease is returned") {
  // Invariant: when an actor's lease ends, plainly returned or killed, its
  // worker is killed and leaves the idle list; a task leased afterwards gets
  // another worker.
  for (bool kill : {false, true}) {
    INFO("kill " << kill);
    Node node(1);
    node.Submit(1, /*actor=*/true);
    REQUIRE(node.clients.grants.contains(1));
    const LeaseGrant actor = node.clients.grants[1];
    node.RunPosted();
    node.WorkersConnect();  // the refilled worker
    node.leases.ReturnLease(1, actor.lease_id, kill);
    CHECK(node.launcher.killed.contains(actor.worker_pid));
    node.Submit(2, /*actor=*/false);
    REQUIRE(node.clients.grants.contains(2));
    CHECK(node.clients.grants[2].worker != actor.worker);
    const auto& idle = node.pool.jobs().at(node.job).idle;
    CHECK(std::find(idle.begin(), idle.end(), actor.worker) == idle.end());
  }
}

TEST_CASE("the refill is capped by pool_size, counts starting workers, and the pool size is capped") {
  // Invariant: a refill never brings idle + starting above pool_size (workers
  // already starting count), a job with a remote driver gets no prestarted
  // workers, and pool_size beyond kMaxPoolSize is capped.
  Node node(2);
  node.Submit(1, true);
  node.Submit(2, true);
  REQUIRE(node.clients.grants.size() == 2);
  node.Submit(3, true);  // no idle worker: dispatch starts one for it
  CHECK(node.launcher.launched.size() == 3);
  node.RunPosted();      // two refills, one worker already starting: one launch
  CHECK(node.launcher.launched.size() == 4);
  node.WorkersConnect();  // request 3 takes one, its refill is posted
  REQUIRE(node.clients.grants.contains(3));
  node.RunPosted();
  CHECK(node.launcher.launched.size() == 5);
  node.WorkersConnect();
  CHECK(node.pool.num_idle() == 2);

  node.pool.GetOrAddJob(node.job).remote = true;
  std::string why;
  CHECK(node.pool.Refill(node.job, &why) == 0);

  FakeLauncher launcher;
  WorkerPool big(WorkerPoolOptions{.launcher = &launcher, .pool_size = 100000});
  CHECK(big.pool_size() == WorkerPool::kMaxPoolSize);
}

TEST_CASE("a refill whose launches keep failing gives up and fails the job's requests") {
  // Invariant: the background refill stops at the kMaxFailedStarts-th failed
  // launch in a row and hands the failure to the lease manager (which refuses
  // the job's queued requests and starts counting failures afresh), instead of
  // retrying launches in a loop.
  Node node(1);
  node.Submit(1, true);  // takes the one prestarted worker
  REQUIRE(node.clients.grants.contains(1));
  node.launcher.fail = true;
  node.pool.GetOrAddJob(node.job).failed_starts = WorkerPool::kMaxFailedStarts - 1;
  std::string why;
  CHECK(node.pool.Refill(node.job, &why) == 0);
  CHECK(why == "exec failed");
  node.pool.GetOrAddJob(node.job).failed_starts = WorkerPool::kMaxFailedStarts - 1;
  node.RunPosted();  // the refill posted by the take
  CHECK(node.launcher.launched.size() == 1);
  CHECK(node.pool.jobs().at(node.job).failed_starts == 0);  // FailJobRequests ran
}

TEST_CASE("a worker start the fork server may have done is made again under a new id") {
  // Invariant: when a launch may have started its worker all the same
  // (Aborted: the template took the request, then died or did not answer),
  // the pool starts it once more under a new worker id and tracks only that
  // one: a late twin with the first id is refused at its hello, and its exit
  // cannot tear down the new worker's registration.
  FakeLauncher launcher;
  WorkerPool pool(WorkerPoolOptions{.launcher = &launcher, .pool_size = 0});
  const JobId job = JobId::FromBinary(std::string(JobId::kSize, '\x03'));
  pool.GetOrAddJob(job).exe_path = "/bin/driver";
  launcher.maybe_started = 1;
  std::string why;
  REQUIRE(pool.StartWorker(job, &why));
  REQUIRE(launcher.launched.size() == 2);
  const WorkerId twin = launcher.launched[0].worker;
  const WorkerId started = launcher.launched[1].worker;
  CHECK(twin != started);
  CHECK(pool.Find(twin) == nullptr);
  REQUIRE(pool.Find(started) != nullptr);
  CHECK_FALSE(pool.OnWorkerHello(twin, 700, "/tmp/twin.sock").ok());
  CHECK(pool.OnWorkerHello(started, 701, "/tmp/w.sock").ok());
  CHECK(pool.jobs().at(job).failed_starts == 0);
}

}  // namespace
}  // namespace lumen::node
