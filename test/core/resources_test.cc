// Resources on one node: GPUs (declared, since the test machine has none),
// fractional GPUs, and custom resources.
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "lumen/common/head_client.h"
#include "lumen/lumen.h"
#include "test/core/test_support.h"

namespace {

void WaitForGate(const std::string& gate) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!std::filesystem::exists(gate) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

// What the task saw: its CUDA_VISIBLE_DEVICES and GetGpuIds, as "env|ids".
std::string GpuView() {
  const char* env = std::getenv("CUDA_VISIBLE_DEVICES");
  std::string ids;
  for (int id : lumen::GetGpuIds()) ids += (ids.empty() ? "" : ",") + std::to_string(id);
  return std::string(env ? env : "<unset>") + "|" + ids;
}

// Holds its GPU until the gate opens; first announces which one it has.
std::string HoldGpu(std::string dir, std::string gate) {
  std::string view = GpuView();
  std::ofstream(dir + "/" + std::to_string(::getpid())) << view;
  WaitForGate(gate);
  return view;
}

int HoldResource(std::string dir, std::string gate) {
  std::ofstream(dir + "/" + std::to_string(::getpid())) << "in";
  WaitForGate(gate);
  return 1;
}

class GpuHolder {
 public:
  static GpuHolder* Create() { return new GpuHolder(); }
  std::string View() { return GpuView(); }
};

size_t FilesIn(const std::string& dir) {
  size_t n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) n += e.is_regular_file() ? 1 : 0;
  return n;
}

}  // namespace

LUMEN_REMOTE(GpuView, HoldGpu, HoldResource, GpuHolder::Create, &GpuHolder::View);

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
  // third waits until one of them ends.
  ScopedCluster cluster(GpuConfig());
  std::string dir = cluster.session_dir() + "/holders";
  std::string gate = cluster.session_dir() + "/gate";
  std::filesystem::create_directories(dir);
  auto a = lumen::Task(HoldGpu).SetNumGpus(1).Remote(dir, gate);
  auto b = lumen::Task(HoldGpu).SetNumGpus(1).Remote(dir, gate);
  REQUIRE(WaitUntil([&] { return FilesIn(dir) == 2; }));
  auto c = lumen::Task(HoldGpu).SetNumGpus(1).Remote(dir, gate);
  REQUIRE(lumen::Wait(std::vector{c}, 1, std::chrono::milliseconds(300)).ready.empty());
  REQUIRE(FilesIn(dir) == 2);
  std::ofstream(gate) << "open";
  std::string va = *lumen::Get(a), vb = *lumen::Get(b), vc = *lumen::Get(c);
  REQUIRE(va != vb);
  REQUIRE(std::set<std::string>{va, vb, vc}.size() >= 2);
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
  for (const auto& v : lumen::Get(refs)) ++per_gpu[*v];
  REQUIRE(per_gpu.size() == 2);
  for (const auto& [gpu, n] : per_gpu) REQUIRE(n == 2);
}

TEST_CASE("an actor keeps its GPU, and impossible GPU requests fail clearly") {
  ScopedCluster cluster(GpuConfig());
  auto holder = lumen::Actor(GpuHolder::Create).SetNumGpus(1).Remote();
  std::string first = *lumen::Get(holder.Task(&GpuHolder::View).Remote());
  REQUIRE((first == "0|0" || first == "1|1"));
  REQUIRE(*lumen::Get(holder.Task(&GpuHolder::View).Remote()) == first);
  // The actor holds one GPU: a task needing both cannot run until it ends.
  auto both = lumen::Task(GpuView).SetNumGpus(2).Remote();
  REQUIRE(lumen::Wait(std::vector{both}, 1, std::chrono::milliseconds(300)).ready.empty());
  holder.Kill();
  REQUIRE(*lumen::Get(both, std::chrono::seconds(30)) != "");
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
  // A fractional amount above 1 GPU is refused outright.
  REQUIRE_THROWS_AS(lumen::Get(lumen::Task(GpuView).SetNumGpus(1.5).Remote(),
                               std::chrono::seconds(10)),
                    lumen::Error);
}

TEST_CASE("a custom resource limits how many tasks run at once") {
  ScopedCluster cluster(GpuConfig());
  std::string dir = cluster.session_dir() + "/holders";
  std::string gate = cluster.session_dir() + "/gate";
  std::filesystem::create_directories(dir);
  auto a = lumen::Task(HoldResource).SetResource("ssd", 1).Remote(dir, gate);
  auto b = lumen::Task(HoldResource).SetResource("ssd", 1).Remote(dir, gate);
  REQUIRE(WaitUntil([&] { return FilesIn(dir) == 1; }));
  REQUIRE(lumen::Wait(std::vector{a, b}, 2, std::chrono::milliseconds(300)).ready.empty());
  REQUIRE(FilesIn(dir) == 1);  // only one holds the ssd
  std::ofstream(gate) << "open";
  REQUIRE(*lumen::Get(a) + *lumen::Get(b) == 2);
  REQUIRE_THROWS_AS(lumen::Get(lumen::Task(HoldResource).SetResource("tpu", 1).Remote(dir, gate),
                               std::chrono::seconds(10)),
                    lumen::Error);
}
