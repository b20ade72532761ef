// nodes (Ray's many_nodes): many node daemons joined to one head, a
// STRICT_SPREAD group with a bundle on each, tasks over every bundle; what the
// head pays per node.
#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "bench/check.h"
#include "bench/process_stats.h"
#include "bench/scale_cluster.h"
#include "bench/scale_experiments.h"
#include "lumen/lumen.h"

namespace lumen::bench {
namespace {

std::string NodeOfTask() { return GetNodeId(); }

}  // namespace
}  // namespace lumen::bench

LUMEN_REMOTE(lumen::bench::NodeOfTask);

namespace lumen::bench {
namespace {

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

ManyNodesResult RunManyNodes(int nodes, int tasks, std::chrono::milliseconds wait_timeout) {
  ManyNodesResult result;
  result.nodes = nodes;
  // 100 daemons and their workers on a few cores starve each other: a node's
  // report may come several periods late although it lives. The head (which
  // inherits this environment) allows 30 missed periods here unless the caller
  // chose; restored afterwards so later experiments keep the default.
  const char* chosen = std::getenv("LUMEN_HEALTH_CHECK_FAILURE_THRESHOLD");
  const bool set_threshold = chosen == nullptr || *chosen == '\0';
  if (set_threshold) ::setenv("LUMEN_HEALTH_CHECK_FAILURE_THRESHOLD", "30", 1);
  absl::Cleanup restore = [set_threshold] {
    if (set_threshold) ::unsetenv("LUMEN_HEALTH_CHECK_FAILURE_THRESHOLD");
  };
  auto start = std::chrono::steady_clock::now();
  auto started = BenchCluster::Start({.nodes = nodes,
                                      .resources = {{"CPU", 1.0}},
                                      .object_store_bytes = 16ull << 20,
                                      .join_timeout = wait_timeout});
  std::move(restore).Invoke();  // the processes have read it
  Check(started.ok(), "cannot start " + std::to_string(nodes) + " nodes: " +
                          std::string(started.ok() ? "" : started.status().message()));
  std::unique_ptr<BenchCluster> cluster = std::move(*started);
  result.start_seconds = SecondsSince(start);
  const pid_t head = cluster->head_pid();
  Config config;
  config.address = cluster->head_address();
  Init(config);
  try {
    auto t0 = std::chrono::steady_clock::now();
    std::vector<std::map<std::string, double>> bundles(static_cast<size_t>(nodes),
                                                       {{"CPU", 1.0}});
    PlacementGroup group = CreatePlacementGroup(
        {.name = "many_nodes", .bundles = bundles, .strategy = PlacementStrategy::STRICT_SPREAD});
    Check(group.Wait(wait_timeout), "the STRICT_SPREAD group of " + std::to_string(nodes) +
                                        " bundles was not created within " +
                                        std::to_string(wait_timeout.count()) + " ms");
    result.group_seconds = SecondsSince(t0);
    t0 = std::chrono::steady_clock::now();
    std::vector<ObjectRef<std::string>> refs;
    refs.reserve(static_cast<size_t>(tasks));
    for (int i = 0; i < tasks; ++i) {
      refs.push_back(Task(NodeOfTask).SetPlacementGroup(group, i % nodes).Remote());
    }
    std::set<std::string> ran_on;
    // Bounded: a lost task fails the run (GetTimeoutError) instead of hanging it.
    for (const auto& node : Get(refs, 4 * wait_timeout)) ran_on.insert(*node);
    result.tasks_seconds = SecondsSince(t0);
    result.distinct_nodes = static_cast<int>(ran_on.size());
    RemovePlacementGroup(group.GetID());
    // The head's share of a CPU with every node reporting and nothing to do.
    const double cpu_before = CpuSeconds(head);
    auto idle_start = std::chrono::steady_clock::now();
    std::this_thread::sleep_for(std::chrono::seconds(2));  // a measurement window, not a wait
    result.head_idle_cpu_per_second = (CpuSeconds(head) - cpu_before) / SecondsSince(idle_start);
    result.head_cpu_seconds = CpuSeconds(head);
    result.head_rss_kib = RssKiB(head);
    long daemons = 0;
    for (pid_t pid : cluster->node_pids()) daemons += RssKiB(pid);
    result.daemon_rss_kib = daemons / std::max(1, nodes);
  } catch (...) {
    Shutdown();
    throw;
  }
  Shutdown();
  cluster->Stop();
  Check(result.distinct_nodes == nodes, "the tasks ran on " +
                                            std::to_string(result.distinct_nodes) + " nodes, not " +
                                            std::to_string(nodes));
  return result;
}

void RunManyNodesScale(ScaleContext& context) {
  const int nodes = context.options.quick ? 20 : 100;
  const int tasks = context.options.quick ? 2000 : 10000;
  const long need_files = 200L + 20L * nodes;
  if (OpenFileLimit() < need_files) {
    context.out.Note("nodes: not run: " + std::to_string(nodes) + " nodes need about " +
                     std::to_string(need_files) + " open files, the limit here is " +
                     std::to_string(OpenFileLimit()));
    return;
  }
  context.out.Value("nodes_head_kib_per_node", "KiB", [&] {
    ManyNodesResult r = RunManyNodes(nodes, tasks, context.wait_timeout);
    char text[400];
    std::snprintf(text, sizeof(text),
                  "nodes: %d daemons started and registered in %.1f s; STRICT_SPREAD group of %d "
                  "bundles created in %.2f s; %d tasks over it in %.2f s (%d distinct nodes); "
                  "head: %.2f CPU s in all, %.4f CPU s per s idle (%.6f per node), RSS %ld KiB "
                  "(%.1f KiB per node); node daemon RSS %ld KiB each",
                  r.nodes, r.start_seconds, r.nodes, r.group_seconds, tasks, r.tasks_seconds,
                  r.distinct_nodes, r.head_cpu_seconds, r.head_idle_cpu_per_second,
                  r.head_idle_cpu_per_second / r.nodes, r.head_rss_kib,
                  static_cast<double>(r.head_rss_kib) / r.nodes, r.daemon_rss_kib);
    context.out.Note(text);
    context.table.Add({.experiment = "nodes",
                       .n = r.nodes,
                       .seconds = r.tasks_seconds,
                       .rate = tasks / r.tasks_seconds,
                       .driver_kib = 0,
                       .daemon_kib = static_cast<double>(r.head_rss_kib),
                       .note = "head CPU s per s idle " + std::to_string(r.head_idle_cpu_per_second)});
    return static_cast<double>(r.head_rss_kib) / r.nodes;
  });
}

}  // namespace lumen::bench
