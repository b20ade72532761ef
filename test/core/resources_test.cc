// Resources on one node: GPUs (declared, since the test machine has none),
// fractional GPUs, and custom resources.
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "lumen/common/head_client.h"
#include "lumen/lumen.h"
#include "test/core/test_support.h"

namespace {

using lumen::test::FilesIn;
using lumen::test::NowNs;

void WaitForGate(const std::string& gate) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!std::filesystem::exists(gate) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

// Arrives at a barrier of `parties` tasks (files in `dir`): they ran at once,
// each in its own worker. Used to warm the pool, so that a task admitted
// later starts at once instead of after a worker's start-up.
bool Gather(std::string dir, int parties) {
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/" + std::to_string(::getpid())).flush();
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    int n = 0;
    for (const auto& e : std::filesystem::directory_iterator(dir)) n += e.exists() ? 1 : 0;
    if (n >= parties) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));  // polling files: no event
  }
  return false;
}

int NoOpProbe() { return 0; }

// What the task saw: its CUDA_VISIBLE_DEVICES and GetGpuIds, as "env|ids".
std::string GpuView() {
  const char* env = std::getenv("CUDA_VISIBLE_DEVICES");
  std::string ids;
  for (int id : lumen::GetGpuIds()) ids += (ids.empty() ? "" : ",") + std::to_string(id);
  return std::string(env ? env : "<unset>") + "|" + ids;
}

// What a holder saw and when: its view (e.g. GPU view) and the interval
// during which it held its resources, as recorded by the task itself.
struct Held {
  std::string view;
  int64_t start_ns = 0;
  int64_t end_ns = 0;
};

Held ParseHeld(const std::string& s) {
  auto a = s.find('@'), b = s.find('@', a + 1);
  return {s.substr(0, a), std::stoll(s.substr(a + 1, b - a - 1)), std::stoll(s.substr(b + 1))};
}

bool Overlap(const Held& x, const Held& y) {
  return x.start_ns < y.end_ns && y.start_ns < x.end_ns;
}

// Holds its GPU until the gate opens; first announces which one it has.
// Returns "view@start_ns@end_ns".
std::string HoldGpu(std::string dir, std::string gate) {
  int64_t start = NowNs();
  std::string view = GpuView();
  std::ofstream(dir + "/" + std::to_string(::getpid())) << view;
  WaitForGate(gate);
  return view + "@" + std::to_string(start) + "@" + std::to_string(NowNs());
}

// Holds its resource until the gate opens; returns "@start_ns@end_ns".
std::string HoldResource(std::string dir, std::string gate) {
  int64_t start = NowNs();
  std::ofstream(dir + "/" + std::to_string(::getpid())) << "in";
  WaitForGate(gate);
  return "@" + std::to_string(start) + "@" + std::to_string(NowNs());
}

// The GPU view of a task and when it started: "view@start_ns@start_ns".
std::string GpuViewAt() {
  int64_t start = NowNs();
  return GpuView() + "@" + std::to_string(start) + "@" + std::to_string(start);
}

class GpuHolder {
 public:
  static GpuHolder* Create() { return new GpuHolder(); }
  std::string View() { return GpuView(); }
};

}  // namespace

LUMEN_REMOTE(Gather, NoOpProbe, GpuView, HoldGpu, HoldResource, GpuViewAt, GpuHolder::Create, &GpuHolder::View);

using lumen::test::ScopedCluster;
using lumen::test::WaitUntil;

namespace {
lumen::Config GpuConfig() {
  lumen::Config config = ScopedCluster::DefaultConfig();
  config.num_cpus = 4;
  config.num_gpus = 2;
  config.resources = {{"ssd", 1}};
  return config;
}
// Four workers idle in the pool (one per CPU), ready for what comes next.
void WarmPool(const std::string& session_dir) {
  std::vector<lumen::ObjectRef<bool>> refs;
  for (int i = 0; i < 4; ++i) refs.push_back(lumen::Task(Gather).Remote(session_dir + "/warm", 4));
  for (const auto& met : lumen::Get(refs)) REQUIRE(*met);
}

// Returns once a CPU-only task submitted now has run: the node has gone past
// every request submitted before it, so one it wrongly admitted is running.
void LetTheNodeCatchUp() { REQUIRE(*lumen::Get(lumen::Task(NoOpProbe).Remote()) == 0); }
}  // namespace

TEST_CASE("a GPU task sees exactly its GPU in CUDA_VISIBLE_DEVICES and GetGpuIds") {
  ScopedCluster cluster(GpuConfig());
  std::string view = *lumen::Get(lumen::Task(GpuView).SetNumGpus(1).Remote());
  REQUIRE((view == "0|0" || view == "1|1"));
  std::string two = *lumen::Get(lumen::Task(GpuView).SetNumGpus(2).Remote());
  REQUIRE((two == "0,1|0,1" || two == "1,0|1,0"));
  // A task without GPUs sees none, even in a worker that ran a GPU task.
  for (int i = 0; i < 4; ++i) {
    std::string none = *lumen::Get(lumen::Task(GpuView).Remote());
    REQUIRE((none == "<unset>|" || none == "|"));
  }
  REQUIRE(lumen::GetGpuIds().empty());
}

TEST_CASE("two tasks never hold the same whole GPU at once") {
  // Invariant: with 2 GPUs, two whole-GPU tasks run on different devices and a
  // third waits until one of them ends: the intervals the tasks record while
  // they hold a device never overlap on the same device, and the third starts
  // only after the gate let the first two end.
  ScopedCluster cluster(GpuConfig());
  std::string dir = cluster.session_dir() + "/holders";
  std::string gate = cluster.session_dir() + "/gate";
  std::filesystem::create_directories(dir);
  WarmPool(cluster.session_dir());
  auto a = lumen::Task(HoldGpu).SetNumGpus(1).Remote(dir, gate);
  auto b = lumen::Task(HoldGpu).SetNumGpus(1).Remote(dir, gate);
  REQUIRE(WaitUntil([&] { return FilesIn(dir) >= 2; }));
  auto c = lumen::Task(HoldGpu).SetNumGpus(1).Remote(dir, gate);
  LetTheNodeCatchUp();
  int64_t gate_opened = NowNs();
  std::ofstream(gate) << "open";
  Held ha = ParseHeld(*lumen::Get(a)), hb = ParseHeld(*lumen::Get(b)), hc = ParseHeld(*lumen::Get(c));
  INFO("a " << ha.view << " b " << hb.view << " c " << hc.view);
  REQUIRE(((ha.view == "0|0" && hb.view == "1|1") || (ha.view == "1|1" && hb.view == "0|0")));
  REQUIRE((hc.view == "0|0" || hc.view == "1|1"));
  // c was not admitted while both devices were held.
  REQUIRE(hc.start_ns > gate_opened);
  const Held& same = hc.view == ha.view ? ha : hb;
  REQUIRE_FALSE(Overlap(hc, same));
}

TEST_CASE("half-GPU tasks share a GPU two at a time") {
  ScopedCluster cluster(GpuConfig());
  std::string dir = cluster.session_dir() + "/holders";
  std::string gate = cluster.session_dir() + "/gate";
  std::filesystem::create_directories(dir);
  std::vector<lumen::ObjectRef<std::string>> refs;
  for (int i = 0; i < 4; ++i) refs.push_back(lumen::Task(HoldGpu).SetNumGpus(0.5).Remote(dir, gate));
  // All four run at once on two GPUs.
  REQUIRE(WaitUntil([&] { return FilesIn(dir) == 4; }));
  std::ofstream(gate) << "open";
  std::map<std::string, int> per_gpu;
  for (const auto& v : lumen::Get(refs)) ++per_gpu[ParseHeld(*v).view];
  REQUIRE(per_gpu.size() == 2);
  for (const auto& [gpu, n] : per_gpu) REQUIRE(n == 2);
}

TEST_CASE("an actor keeps its GPU, and impossible GPU requests fail clearly") {
  ScopedCluster cluster(GpuConfig());
  auto holder = lumen::Actor(GpuHolder::Create).SetNumGpus(1).Remote();
  std::string first = *lumen::Get(holder.Task(&GpuHolder::View).Remote());
  REQUIRE((first == "0|0" || first == "1|1"));
  REQUIRE(*lumen::Get(holder.Task(&GpuHolder::View).Remote()) == first);
  // The actor holds one GPU: a task needing both cannot start until it ends,
  // and then gets exactly both devices.
  auto both = lumen::Task(GpuViewAt).SetNumGpus(2).Remote();
  REQUIRE(lumen::Wait(std::vector{both}, 1, std::chrono::milliseconds(300)).ready.empty());
  int64_t killed = NowNs();
  holder.Kill();
  Held got = ParseHeld(*lumen::Get(both, std::chrono::seconds(30)));
  REQUIRE((got.view == "0,1|0,1" || got.view == "1,0|1,0"));
  REQUIRE(got.start_ns > killed);
  // No node has 3 GPUs: the task waits (it is not lost) and shows as infeasible
  // demand until a node that fits joins.
  auto impossible = lumen::Task(GpuView).SetNumGpus(3).Remote();
  REQUIRE_THROWS_AS(lumen::Get(impossible, std::chrono::milliseconds(300)),
                    lumen::GetTimeoutError);
  auto nodes = lumen::runtime::QueryNodes(lumen::internal::ClusterAddress());
  REQUIRE(nodes.ok());
  auto stats = lumen::runtime::QueryNodeStats(nodes->front().address);
  REQUIRE(stats.ok());
  REQUIRE(stats->infeasible.size() == 1);
  REQUIRE(stats->infeasible.front().resources.at("GPU") == 3);
  REQUIRE(stats->infeasible.front().name == "GpuView");
  // A fractional amount above 1 GPU is refused outright: an error naming the
  // GPU request, well before the Get's timeout (not a wait that times out).
  auto start = std::chrono::steady_clock::now();
  try {
    lumen::Get(lumen::Task(GpuView).SetNumGpus(1.5).Remote(), std::chrono::seconds(60));
    FAIL("a task asking for 1.5 GPUs must be refused");
  } catch (const lumen::GetTimeoutError&) {
    FAIL("refused by timing out, not outright");
  } catch (const lumen::Error& e) {
    INFO(e.what());
    REQUIRE(std::string(e.what()).find("GPU amounts above 1 must be whole") != std::string::npos);
  }
  REQUIRE(std::chrono::steady_clock::now() - start < std::chrono::seconds(20));
}

TEST_CASE("a custom resource limits how many tasks run at once") {
  // Invariant: with one "ssd", the two tasks that need it hold it one after
  // the other: the intervals they record while holding it do not overlap.
  ScopedCluster cluster(GpuConfig());
  std::string dir = cluster.session_dir() + "/holders";
  std::string gate = cluster.session_dir() + "/gate";
  std::filesystem::create_directories(dir);
  WarmPool(cluster.session_dir());
  auto a = lumen::Task(HoldResource).SetResource("ssd", 1).Remote(dir, gate);
  auto b = lumen::Task(HoldResource).SetResource("ssd", 1).Remote(dir, gate);
  REQUIRE(WaitUntil([&] { return FilesIn(dir) >= 1; }));
  LetTheNodeCatchUp();
  int64_t gate_opened = NowNs();
  std::ofstream(gate) << "open";
  Held ha = ParseHeld(*lumen::Get(a)), hb = ParseHeld(*lumen::Get(b));
  REQUIRE_FALSE(Overlap(ha, hb));
  // The second started only once the first could end.
  REQUIRE(std::max(ha.start_ns, hb.start_ns) > gate_opened);
  // A resource no node has: it waits as infeasible (not refused).
  REQUIRE_THROWS_AS(lumen::Get(lumen::Task(HoldResource).SetResource("tpu", 1).Remote(dir, gate),
                               std::chrono::milliseconds(500)),
                    lumen::GetTimeoutError);
}
