// drain_1_node and drain_3_nodes: N no-op tasks submitted at once, then one
// Get of all of them.
#include <malloc.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "bench/check.h"
#include "bench/process_stats.h"
#include "bench/remote_calls.h"
#include "bench/scale_cluster.h"
#include "bench/scale_experiments.h"
#include "lumen/lumen.h"

namespace lumen::bench {
namespace {

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::vector<long> DrainSizes(const ScaleOptions& options) {
  std::vector<long> sizes;
  for (long n : {10000L, 30000L, 100000L, 300000L, 1000000L}) {
    if (n <= options.max_tasks && (!options.quick || n <= 100000)) sizes.push_back(n);
  }
  return sizes;
}

// Tasks per second in batches of 1,000 (single_client_tasks_async) over
// about `seconds`.
double BatchedRate(double seconds) {
  constexpr int kBatch = 1000;
  long done = 0;
  auto start = std::chrono::steady_clock::now();
  while (SecondsSince(start) < seconds) {
    int ok = SmallValueBatch(kBatch);
    Check(ok == kBatch, std::to_string(kBatch - ok) + " tasks of a batch returned wrong");
    done += kBatch;
  }
  return static_cast<double>(done) / SecondsSince(start);
}

// Submits `n` tasks (spread over the nodes when `spread`) and Gets them all;
// the row's memory is each process's peak over its `baseline`.
ScaleRow Drain(const char* experiment, long n, bool spread, const std::vector<pid_t>& daemons,
               long driver_baseline, const std::vector<long>& daemon_baselines) {
  ResetPeakRss();
  for (pid_t pid : daemons) ResetPeakRss(pid);
  auto start = std::chrono::steady_clock::now();
  double submit_seconds = 0;
  {
    std::vector<ObjectRef<int>> refs;
    refs.reserve(static_cast<size_t>(n));
    for (long i = 0; i < n; ++i) {
      refs.push_back(spread ? Task(SmallValue).SetSchedulingStrategy(Spread()).Remote()
                            : Task(SmallValue).Remote());
    }
    submit_seconds = SecondsSince(start);
    int ok = CountEqual(Get(refs), 1);
    Check(ok == n, std::to_string(n - ok) + " of " + std::to_string(n) + " tasks returned wrong");
  }
  ScaleRow row{.experiment = experiment, .n = n, .seconds = SecondsSince(start)};
  row.rate = static_cast<double>(n) / row.seconds;
  row.driver_kib = static_cast<double>(std::max(0L, PeakRssKiB() - driver_baseline));
  for (size_t i = 0; i < daemons.size(); ++i) {
    row.daemon_kib = std::max(row.daemon_kib,
                              static_cast<double>(PeakRssKiB(daemons[i]) - daemon_baselines[i]));
  }
  char note[64];
  std::snprintf(note, sizeof(note), "submitted in %.2f s", submit_seconds);
  row.note = note;
  ::malloc_trim(0);  // what the drain freed goes back before the next size
  return row;
}

void PrintRow(Reporter& out, const ScaleRow& row, double batched_rate) {
  char text[256];
  std::snprintf(text, sizeof(text),
                "%s N=%ld: %.2f s, %.0f tasks/s (%.2f x batched), driver %.0f B/task, "
                "daemon %.0f B/task peak over baseline (%s)",
                row.experiment.c_str(), row.n, row.seconds, row.rate,
                batched_rate > 0 ? row.rate / batched_rate : 0, row.driver_kib * 1024 / row.n,
                row.daemon_kib * 1024 / row.n, row.note.c_str());
  out.Note(text);
}

void DrainOn(ScaleContext& context, const char* experiment, int nodes, bool spread) {
  const std::vector<long> sizes = DrainSizes(context.options);
  std::unique_ptr<BenchCluster> cluster;
  if (!context.out.Step(experiment, [&] {
        cluster = StartAndConnect({.nodes = nodes,
                                    .resources = {{"CPU", nodes == 1 ? 2.0 : 1.0}},
                                    .object_store_bytes = 256ull << 20,
                                    .join_timeout = context.wait_timeout});
      })) {
    return;
  }
  double batched = 0;
  context.out.Value(std::string(experiment) + "_batched_rate", "tasks/s", [&] {
    BatchedRate(0.5);  // warm-up: workers started, leases granted
    batched = BatchedRate(context.options.quick ? 1.0 : 3.0);
    return batched;
  });
  ::malloc_trim(0);
  const long driver_baseline = RssKiB();
  std::vector<long> daemon_baselines;
  for (pid_t pid : cluster->node_pids()) daemon_baselines.push_back(RssKiB(pid));
  for (long n : sizes) {
    bool ok = context.out.Value(std::string(experiment) + "_" + std::to_string(n) + "_seconds",
                                "s", [&] {
      ScaleRow row = Drain(experiment, n, spread, cluster->node_pids(), driver_baseline,
                           daemon_baselines);
      PrintRow(context.out, row, batched);
      context.table.Add(row);
      return row.seconds;
    });
    if (!ok) break;
  }
  const ScaleRow* largest = nullptr;
  for (const auto& row : context.table.rows()) {
    if (row.experiment == experiment) largest = &row;
  }
  if (largest != nullptr) {
    context.out.Value(std::string(experiment) + "_rate_vs_batched", "x",
                      [&] { return batched > 0 ? largest->rate / batched : 0; });
    context.out.Value(std::string(experiment) + "_driver_bytes_per_queued_task", "B",
                      [&] { return largest->driver_kib * 1024 / largest->n; });
    context.out.Value(std::string(experiment) + "_daemon_bytes_per_queued_task", "B",
                      [&] { return largest->daemon_kib * 1024 / largest->n; });
  }
  Shutdown();
  cluster->Stop();
}

}  // namespace

void RunDrainScale(ScaleContext& context) {
  DrainOn(context, "drain_1_node", 1, /*spread=*/false);
  DrainOn(context, "drain_3_nodes", 3, /*spread=*/true);
}

}  // namespace lumen::bench
