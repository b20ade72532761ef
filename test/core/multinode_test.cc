// Multi-node integration tests: a head and three node daemons on loopback
// (distinct ports, store segments and session directories), as separate
// processes, with this test binary as the driver attached to node 0.
#include <signal.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "lumen/common/head_client.h"
#include "lumen/common/process.h"
#include "lumen/lumen.h"
#include "test/core/test_support.h"

namespace {

using lumen::test::MultiNodeCluster;
using lumen::test::FilesIn;
using lumen::test::NowNs;
using lumen::test::Scratch;
using lumen::test::WaitUntil;

std::string HereNode() { return lumen::GetNodeId(); }

// Arrives at a barrier of `parties` tasks (files in `dir`), then says where it ran.
std::string MeetAt(std::string dir, int parties) {
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/" + std::to_string(::getpid()) + "-" + lumen::GetNodeId()).flush();
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    int n = 0;
    for (const auto& entry : std::filesystem::directory_iterator(dir)) {
      (void)entry;
      ++n;
    }
    if (n >= parties) return lumen::GetNodeId();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // polling files: no event
  }
  throw std::runtime_error("barrier timed out: the tasks did not run at the same time");
}

LUMEN_REMOTE(HereNode, MeetAt);

MultiNodeCluster::NodeSpec Cpus(double n) { return {{{"CPU", n}}}; }

}  // namespace

TEST_CASE("SPREAD puts 3 tasks on 3 distinct nodes") {
  MultiNodeCluster cluster({Cpus(2), Cpus(2), Cpus(2)});
  Scratch scratch("spread");
  const std::string& dir = scratch.dir;
  std::vector<lumen::ObjectRef<std::string>> refs;
  for (int i = 0; i < 3; ++i) {
    refs.push_back(lumen::Task(MeetAt).SetSchedulingStrategy(lumen::Spread()).Remote(dir, 3));
  }
  std::set<std::string> nodes;
  for (const auto& node : lumen::Get(refs)) nodes.insert(*node);
  REQUIRE(nodes.size() == 3);
  for (const auto& node : nodes) REQUIRE(cluster.index_of(node) < 3);
}

namespace {

std::string GpuInfo() {
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  std::string ids;
  for (int id : lumen::GetGpuIds()) ids += (ids.empty() ? "" : ",") + std::to_string(id);
  return lumen::GetNodeId() + "|" + (visible ? visible : "<unset>") + "|" + ids;
}

// Meets the others at a barrier, then reports where it ran and on which GPUs.
std::string GpuMeet(std::string dir, int parties) {
  MeetAt(dir, parties);
  return GpuInfo();
}

std::vector<uint8_t> MakeBlob(uint64_t size) {
  std::vector<uint8_t> blob(size);
  for (uint64_t i = 0; i < size; ++i) blob[i] = static_cast<uint8_t>((i * 31 + 7) & 0xff);
  return blob;
}

std::string BlobChecksum(std::vector<uint8_t> blob) {
  uint64_t sum = 0;
  for (uint64_t i = 0; i < blob.size(); i += 4096) sum = sum * 1315423911u + blob[i];
  return lumen::GetNodeId() + ":" + std::to_string(blob.size()) + ":" + std::to_string(sum);
}

// Says it started (a file named after its node in `dir`), waits for `gate`.
std::string AnnounceThenAwait(std::string dir, std::string gate) {
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/" + std::to_string(::getpid()) + "-" + lumen::GetNodeId()).flush();
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!std::filesystem::exists(gate) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // polling a file: no event
  }
  return lumen::GetNodeId();
}

class Where {
 public:
  static Where* Create() { return new Where(); }
  std::string Node() { return lumen::GetNodeId(); }
  int Bump() { return ++calls_; }

 private:
  int calls_ = 0;
};

// AnnounceThenAwait that also says when it ended: "node@end_ns".
std::string AwaitThenSayWhen(std::string dir, std::string gate) {
  std::string node = AnnounceThenAwait(dir, gate);
  return node + "@" + std::to_string(NowNs());
}

// Where and when a task started: "node@start_ns".
std::string HereNodeAt() {
  int64_t start = NowNs();
  return lumen::GetNodeId() + "@" + std::to_string(start);
}

std::pair<std::string, int64_t> SplitAt(const std::string& s) {
  auto at = s.find('@');
  return {s.substr(0, at), std::stoll(s.substr(at + 1))};
}

LUMEN_REMOTE(GpuInfo, GpuMeet, MakeBlob, BlobChecksum, AnnounceThenAwait, AwaitThenSayWhen,
             HereNodeAt, Where::Create, &Where::Node, &Where::Bump);


}  // namespace

TEST_CASE("the DEFAULT policy keeps work local then spills it back to other nodes") {
  // Invariant (hybrid policy): on an idle cluster a task runs on the driver's
  // node; six 1-CPU tasks that must all run at once (a barrier) on three
  // 2-CPU nodes fill the driver's node and spill the rest to the others.
  MultiNodeCluster cluster({Cpus(2), Cpus(2), Cpus(2)});
  REQUIRE(*lumen::Get(lumen::Task(HereNode).Remote()) == cluster.node_id(0));
  Scratch scratch("spill");
  std::vector<lumen::ObjectRef<std::string>> refs;
  for (int i = 0; i < 6; ++i) refs.push_back(lumen::Task(MeetAt).Remote(scratch.dir, 6));
  std::map<std::string, int> per_node;
  for (const auto& node : lumen::Get(refs, std::chrono::seconds(90))) ++per_node[*node];
  REQUIRE(per_node.size() == 3);
  for (size_t i = 0; i < 3; ++i) REQUIRE(per_node[cluster.node_id(i)] == 2);
}

TEST_CASE("the DEFAULT policy sends new work away from a node whose store is nearly full") {
  // Invariant: a node's store use reaches the scheduler (its report, the
  // head's view, the local node's own entry): while the driver's node holds
  // more than 80% of its store, DEFAULT runs new tasks on the node with room
  // even though the driver's node is idle; once the store is freed, work
  // stays local again.
  MultiNodeCluster::NodeSpec small = Cpus(2);
  small.store_bytes = 64ull << 20;
  MultiNodeCluster cluster({small, Cpus(2)});
  // Where a task runs when the driver asks for a new lease: the driver keeps
  // an idle lease a moment for the next task of its shape, so wait until no
  // node holds one (the next task then asks the driver's node again).
  auto where = [&] {
    REQUIRE(WaitUntil([&] {
      for (size_t i = 0; i < 2; ++i) {
        auto stats = lumen::runtime::QueryNodeStats(cluster.node_address(i));
        if (!stats.ok() || stats->active_leases != 0) return false;
      }
      return true;
    }));
    return *lumen::Get(lumen::Task(HereNode).Remote());
  };
  REQUIRE(where() == cluster.node_id(0));

  auto held = lumen::Put(std::vector<uint8_t>(56ull << 20, 7));  // 87.5% of node 0's store
  REQUIRE(WaitUntil([&] { return where() == cluster.node_id(1); }));
  for (int i = 0; i < 3; ++i) REQUIRE(where() == cluster.node_id(1));

  held = lumen::ObjectRef<std::vector<uint8_t>>();
  REQUIRE(WaitUntil([&] { return where() == cluster.node_id(0); }));
}

TEST_CASE("Pack fills one node before the next") {
  MultiNodeCluster cluster({Cpus(2), Cpus(2), Cpus(2)});
  Scratch scratch("pack");
  const std::string& dir = scratch.dir;
  std::vector<lumen::ObjectRef<std::string>> refs;
  for (int i = 0; i < 3; ++i) {
    refs.push_back(lumen::Task(MeetAt).SetSchedulingStrategy(lumen::Pack()).Remote(dir, 3));
  }
  std::map<std::string, int> per_node;
  for (const auto& node : lumen::Get(refs)) ++per_node[*node];
  // Two CPUs per node: the first node is full before a second one is used.
  REQUIRE(per_node.size() == 2);
  std::vector<int> counts;
  for (const auto& [node, n] : per_node) counts.push_back(n);
  std::sort(counts.begin(), counts.end());
  REQUIRE(counts == std::vector<int>{1, 2});
}

TEST_CASE("GPU and fractional GPU and memory and custom resources pick the nodes that have them") {
  MultiNodeCluster cluster({Cpus(2),
                            {{{"CPU", 2}, {"ssd", 1}}},
                            {{{"CPU", 4}, {"GPU", 2}, {"memory", 4.0 * (1 << 30)}}}});
  // A whole GPU: only node 2 has GPUs; the worker sees exactly its device.
  std::string info = *lumen::Get(lumen::Task(GpuInfo).SetNumGpus(1).Remote());
  std::string node = info.substr(0, info.find('|'));
  REQUIRE(node == cluster.node_id(2));
  std::string rest = info.substr(info.find('|') + 1);
  std::string visible = rest.substr(0, rest.find('|'));
  REQUIRE((visible == "0" || visible == "1"));
  REQUIRE(rest.substr(rest.find('|') + 1) == visible);  // GetGpuIds agrees

  // Half GPUs: two tasks share one device, at the same time.
  Scratch scratch("halves");
  const std::string& dir = scratch.dir;
  auto a = lumen::Task(GpuMeet).SetNumGpus(0.5).Remote(dir, 2);
  auto b = lumen::Task(GpuMeet).SetNumGpus(0.5).Remote(dir, 2);
  std::string ia = *lumen::Get(a), ib = *lumen::Get(b);
  REQUIRE(ia.substr(0, ia.find('|')) == cluster.node_id(2));
  REQUIRE(ia == ib);  // same node, same single device

  // 2 GiB of memory: only node 2 declares that much.
  REQUIRE(*lumen::Get(lumen::Task(HereNode).SetMemory(2ull << 30).Remote()) == cluster.node_id(2));
  // A custom resource only node 1 has.
  REQUIRE(*lumen::Get(lumen::Task(HereNode).SetResource("ssd", 1).Remote()) == cluster.node_id(1));
  // CPU-only work on an idle cluster: the default (hybrid) policy keeps it on
  // the driver's own node.
  REQUIRE(*lumen::Get(lumen::Task(HereNode).Remote()) == cluster.node_id(0));
}

TEST_CASE("node affinity: hard runs there or fails naming the node and soft falls back") {
  MultiNodeCluster cluster({Cpus(2), Cpus(2), {{{"CPU", 2}, {"ssd", 1}}}});
  for (size_t i = 0; i < 3; ++i) {
    auto hard = lumen::NodeAffinity(cluster.node_id(i), false);
    REQUIRE(*lumen::Get(lumen::Task(HereNode).SetSchedulingStrategy(hard).Remote()) ==
            cluster.node_id(i));
  }
  auto soft = lumen::NodeAffinity(cluster.node_id(2), true);
  REQUIRE(*lumen::Get(lumen::Task(HereNode).SetSchedulingStrategy(soft).Remote()) ==
          cluster.node_id(2));
  std::string unknown = lumen::NodeId::Random().Hex();
  try {
    lumen::Get(lumen::Task(HereNode)
                   .SetSchedulingStrategy(lumen::NodeAffinity(unknown, false))
                   .Remote(),
               std::chrono::seconds(30));
    FAIL("a hard affinity to an unknown node must fail");
  } catch (const lumen::Error& e) {
    REQUIRE(std::string(e.what()).find(unknown) != std::string::npos);
  }
  // A soft affinity to an unknown node falls back to the default policy over
  // the nodes that can run the task: here only node 2 has an "ssd".
  REQUIRE(*lumen::Get(lumen::Task(HereNode)
                          .SetResource("ssd", 1)
                          .SetSchedulingStrategy(lumen::NodeAffinity(unknown, true))
                          .Remote()) == cluster.node_id(2));
  // Actors too.
  auto actor = lumen::Actor(Where::Create)
                   .SetSchedulingStrategy(lumen::NodeAffinity(cluster.node_id(1), false))
                   .Remote();
  REQUIRE(*lumen::Get(actor.Task(&Where::Node).Remote()) == cluster.node_id(1));
}

TEST_CASE("placement groups: every strategy with tasks and actors in bundles and infeasible and removal") {
  MultiNodeCluster cluster({Cpus(4), Cpus(4), Cpus(4)});
  auto spread = lumen::CreatePlacementGroup(
      {.name = "strict-spread",
       .bundles = {{{"CPU", 1}}, {{"CPU", 1}}, {{"CPU", 1}}},
       .strategy = lumen::PlacementStrategy::STRICT_SPREAD});
  REQUIRE(spread.Wait(std::chrono::seconds(20)));
  auto info = spread.Info();
  REQUIRE(info.state == "CREATED");
  REQUIRE(std::set<std::string>(info.bundle_nodes.begin(), info.bundle_nodes.end()).size() == 3);
  // A task in bundle 2 runs where bundle 2 is; an actor in bundle 0 where that is.
  REQUIRE(*lumen::Get(lumen::Task(HereNode).SetPlacementGroup(spread, 2).Remote()) ==
          info.bundle_nodes[2]);
  auto actor = lumen::Actor(Where::Create).SetPlacementGroup(spread, 0).Remote();
  REQUIRE(*lumen::Get(actor.Task(&Where::Node).Remote()) == info.bundle_nodes[0]);
  // Work in a bundle runs within the bundle's resources only: bundle 1 holds one
  // CPU, so a second task waits for the first even though its node has three
  // more CPUs free; and a task bigger than the bundle is refused.
  Scratch scratch("bundle");
  const std::string &dir = scratch.dir, &gate = scratch.gate;
  // The tasks record when they start and end: the second starts only after
  // the first ended.
  auto first = lumen::Task(AwaitThenSayWhen).SetPlacementGroup(spread, 1).Remote(dir, gate);
  REQUIRE(WaitUntil([&] { return FilesIn(dir) == 1; }));
  auto second = lumen::Task(HereNodeAt).SetPlacementGroup(spread, 1).Remote();
  std::ofstream(gate).flush();
  auto [first_node, first_end] = SplitAt(*lumen::Get(first));
  auto [second_node, second_start] = SplitAt(*lumen::Get(second));
  REQUIRE(first_node == info.bundle_nodes[1]);
  REQUIRE(second_node == info.bundle_nodes[1]);
  REQUIRE(second_start > first_end);
  REQUIRE_THROWS_WITH(
      lumen::Get(lumen::Task(HereNode).SetNumCpus(2).SetPlacementGroup(spread, 1).Remote(),
                 std::chrono::seconds(30)),
      Catch::Contains("more than its placement group bundle holds"));

  auto pack = lumen::CreatePlacementGroup({.bundles = {{{"CPU", 1}}, {{"CPU", 1}}},
                                           .strategy = lumen::PlacementStrategy::STRICT_PACK});
  REQUIRE(pack.Wait(std::chrono::seconds(20)));
  auto pack_nodes = pack.Info().bundle_nodes;
  REQUIRE(pack_nodes[0] == pack_nodes[1]);

  auto soft_pack = lumen::CreatePlacementGroup({.bundles = {{{"CPU", 1}}, {{"CPU", 1}}},
                                                .strategy = lumen::PlacementStrategy::PACK});
  REQUIRE(soft_pack.Wait(std::chrono::seconds(20)));
  REQUIRE(soft_pack.Info().bundle_nodes[0] == soft_pack.Info().bundle_nodes[1]);

  auto soft_spread = lumen::CreatePlacementGroup(
      {.bundles = {{{"CPU", 1}}, {{"CPU", 1}}, {{"CPU", 1}}},
       .strategy = lumen::PlacementStrategy::SPREAD});
  REQUIRE(soft_spread.Wait(std::chrono::seconds(20)));
  auto ss = soft_spread.Info().bundle_nodes;
  REQUIRE(std::set<std::string>(ss.begin(), ss.end()).size() == 3);

  // Four bundles on distinct nodes cannot fit three nodes: it waits, infeasible.
  auto impossible = lumen::CreatePlacementGroup(
      {.bundles = {{{"CPU", 1}}, {{"CPU", 1}}, {{"CPU", 1}}, {{"CPU", 1}}},
       .strategy = lumen::PlacementStrategy::STRICT_SPREAD});
  REQUIRE_FALSE(impossible.Wait(std::chrono::milliseconds(300)));
  REQUIRE(impossible.Info().state == "INFEASIBLE");
  std::string status;
  REQUIRE(lumen::test::RunCommand(std::string(LUMEN_CLI_PATH) + " list placement-groups --address " +
                                      cluster.head_address(),
                                  &status) == 0);
  REQUIRE(status.find("INFEASIBLE") != std::string::npos);
  REQUIRE(status.find("strict-spread") != std::string::npos);

  // Removing a group ends what runs in it and frees its resources.
  double before = lumen::AvailableResources()["CPU"];
  lumen::RemovePlacementGroup(spread.GetID());
  // Removal is asynchronous, as Ray's: a call that reached the actor before
  // its node ended it may still be answered (the suite saw one once); the actor must
  // die, so calls soon fail with ActorDiedError.
  bool actor_died = false;
  for (int call = 0; call < 10000 && !actor_died; ++call) {
    try {
      lumen::Get(actor.Task(&Where::Node).Remote(), std::chrono::seconds(30));
    } catch (const lumen::ActorDiedError&) {
      actor_died = true;
    }
  }
  REQUIRE(actor_died);
  REQUIRE_THROWS_AS(spread.Wait(std::chrono::seconds(1)), lumen::PlacementGroupError);
  REQUIRE(WaitUntil([&] { return lumen::AvailableResources()["CPU"] >= before + 3; }));
  lumen::RemovePlacementGroup(impossible.GetID());
}

TEST_CASE("a placement group a node refuses is rolled back and placed again") {
  // Node 2 refuses its first prepare: the bundles reserved on nodes 0 and 1
  // are released (rolled back) and the group is placed on the next try.
  MultiNodeCluster cluster(
      {Cpus(2), Cpus(2), {{{"CPU", 2}}, 384ull << 20, {{"LUMEN_TESTING_REFUSE_PREPARES", "1"}}}});
  auto pg = lumen::CreatePlacementGroup({.bundles = {{{"CPU", 2}}, {{"CPU", 2}}, {{"CPU", 2}}},
                                         .strategy = lumen::PlacementStrategy::STRICT_SPREAD});
  REQUIRE(pg.Wait(std::chrono::seconds(20)));
  // Exactly one reservation per node: nothing of the rolled-back attempt leaked.
  for (size_t i = 0; i < 3; ++i) {
    auto stats = lumen::runtime::QueryNodeStats(cluster.node_address(i));
    REQUIRE(stats.ok());
    REQUIRE(stats->available["CPU"] == 0);
  }
  lumen::RemovePlacementGroup(pg.GetID());
  REQUIRE(WaitUntil([&] {
    for (size_t i = 0; i < 3; ++i) {
      auto stats = lumen::runtime::QueryNodeStats(cluster.node_address(i));
      if (!stats.ok() || stats->available["CPU"] != 2) return false;
    }
    return true;
  }));
}

TEST_CASE("cross-node Get of a 256 MiB object: bytes intact and one copy per node") {
  MultiNodeCluster cluster({Cpus(2), Cpus(2), Cpus(2)});
  const uint64_t size = 256ull << 20;
  auto blob = lumen::Task(MakeBlob)
                  .SetSchedulingStrategy(lumen::NodeAffinity(cluster.node_id(1), false))
                  .Remote(size);
  // The driver (node 0) pulls it from node 1's store.
  auto bytes = lumen::Get(blob);
  REQUIRE(bytes->size() == size);
  bool intact = true;
  for (uint64_t i = 0; i < size && intact; ++i) {
    intact = (*bytes)[i] == static_cast<uint8_t>((i * 31 + 7) & 0xff);
  }
  REQUIRE(intact);
  bytes.reset();
  // Two readers on node 2: the first pulls a copy, the second uses it.
  auto objects_before = lumen::runtime::QueryNodeStats(cluster.node_address(2))->store_objects;
  auto on2 = lumen::NodeAffinity(cluster.node_id(2), false);
  std::string first = *lumen::Get(lumen::Task(BlobChecksum).SetSchedulingStrategy(on2).Remote(blob));
  std::string second = *lumen::Get(lumen::Task(BlobChecksum).SetSchedulingStrategy(on2).Remote(blob));
  REQUIRE(first == second);
  REQUIRE(first.rfind(cluster.node_id(2), 0) == 0);
  REQUIRE(lumen::runtime::QueryNodeStats(cluster.node_address(2))->store_objects ==
          objects_before + 1);
  // When the last reference goes, every copy goes.
  blob = lumen::ObjectRef<std::vector<uint8_t>>();
  REQUIRE(WaitUntil([&] {
    for (size_t i = 0; i < 3; ++i) {
      auto stats = lumen::runtime::QueryNodeStats(cluster.node_address(i));
      if (!stats.ok() || stats->store_used != 0) return false;
    }
    return true;
  }));
}

TEST_CASE("kill -9 of a node daemon: its tasks retry and its actor restarts elsewhere") {
  MultiNodeCluster cluster({Cpus(2), Cpus(4), Cpus(2)});
  std::string victim = cluster.node_id(1);
  Scratch scratch("victim");
  const std::string &dir = scratch.dir, &gate = scratch.gate;
  auto near_victim = lumen::NodeAffinity(victim, /*soft=*/true);
  std::vector<lumen::ObjectRef<std::string>> refs;
  for (int i = 0; i < 2; ++i) {
    refs.push_back(lumen::Task(AnnounceThenAwait).SetSchedulingStrategy(near_victim).Remote(dir, gate));
  }
  auto actor =
      lumen::Actor(Where::Create).SetMaxRestarts(1).SetSchedulingStrategy(near_victim).Remote();
  REQUIRE(*lumen::Get(actor.Task(&Where::Node).Remote()) == victim);
  REQUIRE(*lumen::Get(actor.Task(&Where::Bump).Remote()) == 1);
  // An object whose only copy is in the victim's store.
  auto only_there = lumen::Task(MakeBlob)
                        .SetSchedulingStrategy(lumen::NodeAffinity(victim, false))
                        .Remote(uint64_t{1} << 20);
  REQUIRE(lumen::Wait(std::vector{only_there}, 1, std::chrono::seconds(30)).ready.size() == 1);
  // And one that a reader on node 2 copied: it survives in node 2's store.
  auto copied = lumen::Task(MakeBlob)
                    .SetSchedulingStrategy(lumen::NodeAffinity(victim, false))
                    .Remote(uint64_t{2} << 20);
  REQUIRE(lumen::Get(lumen::Task(BlobChecksum)
                         .SetSchedulingStrategy(lumen::NodeAffinity(cluster.node_id(2), false))
                         .Remote(copied))
              ->rfind(cluster.node_id(2), 0) == 0);
  std::string listing;
  REQUIRE(WaitUntil([&] {  // the owner has heard of the copy
    lumen::test::RunCommand(std::string(LUMEN_CLI_PATH) + " list objects --address " +
                                cluster.head_address(),
                            &listing);
    auto at = listing.find(copied.ID().Hex().substr(0, 16));
    if (at == std::string::npos) return false;
    std::string line = listing.substr(at, listing.find('\n', at) - at);
    return line.find(cluster.node_id(2).substr(0, 12)) != std::string::npos;
  }));
  REQUIRE(WaitUntil([&] { return FilesIn(dir) == 2; }));

  std::vector<pid_t> workers;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    workers.push_back(std::stoi(entry.path().filename().string()));
  }
  cluster.KillNode(1);
  // Its workers die with it (before the gate opens, so they cannot finish).
  REQUIRE(lumen::WaitForChildExit(cluster.daemon_pid(1), 10000));
  REQUIRE(WaitUntil([&] {
    for (pid_t pid : workers)
      if (lumen::ProcessAlive(pid)) return false;
    return true;
  }));
  std::ofstream(gate).flush();
  for (const auto& node : lumen::Get(refs, std::chrono::seconds(60))) {
    INFO("nodes: " << cluster.node_id(0) << " " << cluster.node_id(1) << " " << cluster.node_id(2));
    REQUIRE(*node != victim);
    REQUIRE(cluster.index_of(*node) < 3);
  }
  std::string actor_node = *lumen::Get(actor.Task(&Where::Node).Remote(), std::chrono::seconds(60));
  REQUIRE(actor_node != victim);
  REQUIRE(*lumen::Get(actor.Task(&Where::Bump).Remote()) == 1);  // a new instance
  REQUIRE_THROWS_AS(lumen::Get(only_there, std::chrono::seconds(30)), lumen::ObjectLostError);
  // The head saw it die.
  REQUIRE(WaitUntil([&] {
    for (const auto& n : lumen::Nodes())
      if (n.id == victim) return !n.alive;
    return false;
  }));
  // The copy on node 2 outlives it: Get reads that one.
  auto survivor = lumen::Get(copied, std::chrono::seconds(30));
  REQUIRE(survivor->size() == (2u << 20));
  REQUIRE((*survivor)[12345] == static_cast<uint8_t>((12345 * 31 + 7) & 0xff));
}

TEST_CASE("infeasible work waits and shows in lumen status and runs when a node that fits joins") {
  MultiNodeCluster cluster({Cpus(2), Cpus(2)});
  auto ref = lumen::Task(HereNode).SetResource("tpu", 1).Remote();
  REQUIRE_THROWS_AS(lumen::Get(ref, std::chrono::milliseconds(300)), lumen::GetTimeoutError);
  std::string status;
  REQUIRE(WaitUntil([&] {
    lumen::test::RunCommand(std::string(LUMEN_CLI_PATH) + " status --address " +
                                cluster.head_address(),
                            &status);
    return status.find("tpu") != std::string::npos;
  }));
  REQUIRE(status.find("nfeasible") != std::string::npos);
  size_t added = cluster.AddNode({{{"CPU", 1}, {"tpu", 1}}});
  REQUIRE(*lumen::Get(ref, std::chrono::seconds(30)) == cluster.node_id(added));
}

TEST_CASE("lumen list shows actors and tasks and objects across nodes") {
  MultiNodeCluster cluster({Cpus(2), Cpus(2)});
  auto actor = lumen::Actor(Where::Create)
                   .SetName("listed-actor")
                   .SetSchedulingStrategy(lumen::NodeAffinity(cluster.node_id(1), false))
                   .Remote();
  REQUIRE(*lumen::Get(actor.Task(&Where::Node).Remote()) == cluster.node_id(1));
  REQUIRE(*lumen::Get(lumen::Task(HereNode).SetName("named-task").Remote()) == cluster.node_id(0));
  auto big = lumen::Put(std::vector<uint8_t>(1 << 20, 7));
  std::string cli = std::string(LUMEN_CLI_PATH);
  std::string out;
  REQUIRE(lumen::test::RunCommand(cli + " list actors --address " + cluster.head_address(), &out) == 0);
  REQUIRE(out.find("Where::Create") != std::string::npos);
  REQUIRE(out.find("listed-actor") != std::string::npos);
  REQUIRE(out.find("ALIVE") != std::string::npos);
  REQUIRE(out.find(cluster.node_id(1).substr(0, 12)) != std::string::npos);
  REQUIRE(lumen::test::RunCommand(cli + " list tasks --address " + cluster.head_address(), &out) == 0);
  REQUIRE(out.find("named-task") != std::string::npos);
  REQUIRE(out.find("FINISHED") != std::string::npos);
  REQUIRE(lumen::test::RunCommand(cli + " list objects --address " + cluster.head_address(), &out) == 0);
  REQUIRE(out.find(big.ID().Hex().substr(0, 16)) != std::string::npos);
  REQUIRE(out.find("STORED") != std::string::npos);
}

TEST_CASE("a node that stops answering health checks is declared dead and its tasks run elsewhere") {
  MultiNodeCluster cluster({Cpus(2), Cpus(4), Cpus(2)});
  std::string victim = cluster.node_id(1);
  Scratch scratch("frozen");
  const std::string &dir = scratch.dir, &gate = scratch.gate;
  std::vector<lumen::ObjectRef<std::string>> refs;
  for (int i = 0; i < 2; ++i) {
    refs.push_back(lumen::Task(AnnounceThenAwait)
                       .SetSchedulingStrategy(lumen::NodeAffinity(victim, true))
                       .Remote(dir, gate));
  }
  REQUIRE(WaitUntil([&] { return FilesIn(dir) == 2; }));
  // Frozen, not dead: its sockets stay open, only its reports stop.
  REQUIRE(::kill(cluster.daemon_pid(1), SIGSTOP) == 0);
  REQUIRE(WaitUntil([&] {
    for (const auto& n : lumen::Nodes())
      if (n.id == victim) return !n.alive;
    return false;
  }));
  std::ofstream(gate).flush();
  for (const auto& node : lumen::Get(refs, std::chrono::seconds(60))) REQUIRE(*node != victim);
  // Woken up, it learns it was declared dead and stops (a new incarnation
  // would have to join again).
  REQUIRE(::kill(cluster.daemon_pid(1), SIGCONT) == 0);
  REQUIRE(lumen::WaitForChildExit(cluster.daemon_pid(1), 20000));
}

TEST_CASE("LUMEN_HEALTH_CHECK_FAILURE_THRESHOLD sets how many missed checks declare a node dead") {
  // Invariant: with checks every 100 ms and a threshold of 30, a frozen node is
  // declared dead no sooner than ~3 s after it froze (the default, 5, would
  // take ~0.5 s). A lower bound: a slow machine only makes it later.
  MultiNodeCluster cluster({Cpus(2), Cpus(2)}, {{"LUMEN_HEALTH_CHECK_FAILURE_THRESHOLD", "30"}});
  std::string victim = cluster.node_id(1);
  auto frozen = std::chrono::steady_clock::now();
  REQUIRE(::kill(cluster.daemon_pid(1), SIGSTOP) == 0);
  REQUIRE(WaitUntil(
      [&] {
        for (const auto& n : lumen::Nodes())
          if (n.id == victim) return !n.alive;
        return false;
      },
      std::chrono::seconds(60)));
  auto declared = std::chrono::steady_clock::now() - frozen;
  REQUIRE(::kill(cluster.daemon_pid(1), SIGCONT) == 0);
  REQUIRE(declared >= std::chrono::milliseconds(2500));
  REQUIRE(lumen::WaitForChildExit(cluster.daemon_pid(1), 20000));
}

TEST_CASE("a head stalled past the failure threshold does not declare its nodes dead") {
  // Invariant (issue 17, the 100-node hang): time the head itself did not run
  // is not counted as the nodes' silence. The whole machine starves: the
  // daemons and the head stop for 2 s, four times the silence limit (100 ms x
  // 5). The head resumes first, so its check runs 2 s late before any node
  // has reported again; then the daemons resume. No node may be declared
  // dead, in that check or the next ones.
  MultiNodeCluster cluster({Cpus(2), Cpus(2)});
  REQUIRE(::kill(cluster.daemon_pid(0), SIGSTOP) == 0);
  REQUIRE(::kill(cluster.daemon_pid(1), SIGSTOP) == 0);
  REQUIRE(::kill(cluster.head_pid(), SIGSTOP) == 0);
  std::this_thread::sleep_for(std::chrono::seconds(2));  // the stall itself, not a wait
  REQUIRE(::kill(cluster.head_pid(), SIGCONT) == 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the head's late check first
  REQUIRE(::kill(cluster.daemon_pid(0), SIGCONT) == 0);
  REQUIRE(::kill(cluster.daemon_pid(1), SIGCONT) == 0);
  // Alive throughout 1.5 s of the head's checks (15 periods) after it resumed.
  auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(1500);
  while (std::chrono::steady_clock::now() < until) {
    auto nodes = lumen::runtime::QueryNodes(cluster.head_address());
    REQUIRE(nodes.ok());
    REQUIRE(nodes->size() == 2);
    for (const auto& n : *nodes) REQUIRE(n.alive);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // polling cadence
  }
  CHECK(::kill(cluster.daemon_pid(0), 0) == 0);  // neither daemon was told to exit
  CHECK(::kill(cluster.daemon_pid(1), 0) == 0);
}

TEST_CASE("nodes that lose the head retry and join a new head on the same address") {
  MultiNodeCluster cluster({Cpus(2), Cpus(2)});
  cluster.RestartHead();
  REQUIRE(WaitUntil([&] {
    auto nodes = lumen::runtime::QueryNodes(cluster.head_address());
    if (!nodes.ok()) return false;
    int alive = 0;
    for (const auto& n : *nodes) alive += n.alive ? 1 : 0;
    return alive == 2;
  }));
  // The cluster works on: tasks still reach the other node.
  REQUIRE(*lumen::Get(lumen::Task(HereNode)
                          .SetSchedulingStrategy(lumen::NodeAffinity(cluster.node_id(1), false))
                          .Remote(),
                      std::chrono::seconds(30)) == cluster.node_id(1));
}

TEST_CASE("a placement group that loses a node is placed again and its actor restarts in it") {
  // Node 0 (the driver's) has no "slot": the group lands on nodes 1 to 3.
  MultiNodeCluster::NodeSpec slot{{{"CPU", 2}, {"slot", 1}}};
  MultiNodeCluster cluster({Cpus(2), slot, slot, slot});
  auto pg = lumen::CreatePlacementGroup({.bundles = {{{"CPU", 1}, {"slot", 1}}, {{"CPU", 1}, {"slot", 1}}},
                                         .strategy = lumen::PlacementStrategy::STRICT_SPREAD});
  REQUIRE(pg.Wait(std::chrono::seconds(20)));
  std::string lost = pg.Info().bundle_nodes[0];
  // A call made just after the death may still reach the dying process (the
  // head can re-place the group before this driver hears of the death): it is
  // retried on the next incarnation, as in Ray.
  auto actor = lumen::Actor(Where::Create)
                   .SetMaxRestarts(1)
                   .SetMaxTaskRetries(1)
                   .SetPlacementGroup(pg, 0)
                   .Remote();
  REQUIRE(*lumen::Get(actor.Task(&Where::Node).Remote()) == lost);
  cluster.KillNode(cluster.index_of(lost));
  REQUIRE(WaitUntil([&] {
    auto info = pg.Info();
    return info.state == "CREATED" && info.bundle_nodes[0] != lost && info.bundle_nodes[1] != lost;
  }));
  auto info = pg.Info();
  REQUIRE(info.bundle_nodes[0] != info.bundle_nodes[1]);
  REQUIRE(*lumen::Get(actor.Task(&Where::Node).Remote(), std::chrono::seconds(60)) ==
          info.bundle_nodes[0]);
}
