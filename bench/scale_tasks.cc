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

// CPU seconds (user + system) spent so far by the driver, the head, the node
// daemons and their workers (the daemons' children). On a loaded machine the rate of
// a CPU-bound run follows its CPU per task, so comparing CPU per task of the
// drain and of the batched run says which one does more work per task,
// whatever else runs meanwhile. A worker that exited in between takes its CPU
// time with it (none does during these runs).
struct ClusterCpu {
  double driver = 0;
  double head = 0;
  double daemons = 0;
  double workers = 0;

  static ClusterCpu Now(const BenchCluster& cluster) {
    ClusterCpu cpu;
    cpu.driver = CpuSeconds();
    cpu.head = CpuSeconds(cluster.head_pid());
    for (pid_t daemon : cluster.node_pids()) {
      cpu.daemons += CpuSeconds(daemon);
      for (pid_t worker : ChildrenOf(daemon)) cpu.workers += CpuSeconds(worker);
    }
    return cpu;
  }
  ClusterCpu operator-(const ClusterCpu& before) const {
    return {driver - before.driver, head - before.head, daemons - before.daemons,
            workers - before.workers};
  }
  double total() const { return driver + head + daemons + workers; }
  // "CPU T us/task: driver D head H daemons N workers W" for `tasks` tasks.
  std::string PerTask(long tasks) const {
    char text[160];
    const double us = 1e6 / static_cast<double>(tasks);
    std::snprintf(text, sizeof(text),
                  "CPU %.1f us/task: driver %.1f head %.1f daemons %.1f workers %.1f",
                  total() * us, driver * us, head * us, daemons * us, workers * us);
    return text;
  }
};

std::vector<long> DrainSizes(const ScaleOptions& options) {
  std::vector<long> sizes;
  for (long n : {10000L, 30000L, 100000L, 300000L, 1000000L}) {
    if (n <= options.max_tasks && (!options.quick || n <= 100000)) sizes.push_back(n);
  }
  return sizes;
}

// Tasks per second in batches of 1,000 (single_client_tasks_async) over
// about `seconds`; `done` (when given) receives the number of tasks run.
double BatchedRate(double seconds, long* done_out = nullptr) {
  constexpr int kBatch = 1000;
  long done = 0;
  auto start = std::chrono::steady_clock::now();
  while (SecondsSince(start) < seconds) {
    int ok = SmallValueBatch(kBatch);
    Check(ok == kBatch, std::to_string(kBatch - ok) + " tasks of a batch returned wrong");
    done += kBatch;
  }
  if (done_out != nullptr) *done_out = done;
  return static_cast<double>(done) / SecondsSince(start);
}

// How long to measure the batched rate just before and just after a drain of
// `n` tasks: a quarter of the drain's expected time at `batched` tasks/s, 1 to
// 15 s. The load of this shared machine changes by 2x within a minute, so a
// drain is compared with what the same machine did around it, not with a rate
// measured minutes earlier (the 0.48 of an earlier full run was measured that
// way).
double BracketSeconds(long n, double batched, bool quick) {
  const double expected = batched > 0 ? static_cast<double>(n) / batched : 1.0;
  return std::clamp(expected / 4, quick ? 0.5 : 1.0, quick ? 5.0 : 15.0);
}

// Submits `n` tasks (spread over the nodes when `spread`) and Gets them all;
// the row's memory is each process's peak over its resident memory just
// before.
ScaleRow Drain(const char* experiment, long n, bool spread, const BenchCluster& cluster) {
  const std::vector<pid_t>& daemons = cluster.node_pids();
  // Baselines just before the drain (after the batched run before it).
  ::malloc_trim(0);
  const long driver_baseline = RssKiB();
  std::vector<long> daemon_baselines;
  for (pid_t pid : daemons) daemon_baselines.push_back(RssKiB(pid));
  ResetPeakRss();
  for (pid_t pid : daemons) ResetPeakRss(pid);
  const ClusterCpu cpu_before = ClusterCpu::Now(cluster);
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
  const ClusterCpu cpu = ClusterCpu::Now(cluster) - cpu_before;
  row.rate = static_cast<double>(n) / row.seconds;
  row.driver_kib = static_cast<double>(std::max(0L, PeakRssKiB() - driver_baseline));
  for (size_t i = 0; i < daemons.size(); ++i) {
    row.daemon_kib = std::max(row.daemon_kib,
                              static_cast<double>(PeakRssKiB(daemons[i]) - daemon_baselines[i]));
  }
  char note[96];
  std::snprintf(note, sizeof(note), "submitted in %.2f s (%.0f tasks/s); ", submit_seconds,
                submit_seconds > 0 ? static_cast<double>(n) / submit_seconds : 0.0);
  row.note = note + cpu.PerTask(n);
  ::malloc_trim(0);  // what the drain freed goes back before the next size
  return row;
}

// `batched_rate`: the rate measured once before the drains; `around`: the
// mean of the batched rates just before and just after this drain.
void PrintRow(Reporter& out, const ScaleRow& row, double batched_rate, double around) {
  char text[512];
  std::snprintf(text, sizeof(text),
                "%s N=%ld: %.2f s, %.0f tasks/s (%.2f x batched around it: %.0f tasks/s; "
                "%.2f x the first batched), driver %.0f B/task, "
                "daemon %.0f B/task peak over baseline (%s)",
                row.experiment.c_str(), row.n, row.seconds, row.rate,
                around > 0 ? row.rate / around : 0, around,
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
    if (spread) {
      // The drains' own shape (SPREAD) leases apart: start its workers now,
      // not in the first drain.
      std::vector<ObjectRef<int>> refs;
      for (int i = 0; i < 2000; ++i) {
        refs.push_back(Task(SmallValue).SetSchedulingStrategy(Spread()).Remote());
      }
      Check(CountEqual(Get(refs), 1) == 2000, "a SPREAD warm-up task returned wrong");
    }
    const ClusterCpu before = ClusterCpu::Now(*cluster);
    long done = 0;
    batched = BatchedRate(context.options.quick ? 1.0 : 3.0, &done);
    const ClusterCpu cpu = ClusterCpu::Now(*cluster) - before;
    context.out.Note(std::string(experiment) + " batched: " + cpu.PerTask(done));
    return batched;
  });
  double largest_vs_around = 0;
  for (long n : sizes) {
    bool ok = context.out.Value(std::string(experiment) + "_" + std::to_string(n) + "_seconds",
                                "s", [&] {
      const double bracket = BracketSeconds(n, batched, context.options.quick);
      const double before = BatchedRate(bracket);
      ScaleRow row = Drain(experiment, n, spread, *cluster);
      const double after = BatchedRate(bracket);
      const double around = (before + after) / 2;
      char note[96];
      std::snprintf(note, sizeof(note), "; batched before %.0f after %.0f tasks/s", before, after);
      row.note += note;
      PrintRow(context.out, row, batched, around);
      largest_vs_around = around > 0 ? row.rate / around : 0;
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
    // Against the batched rate measured around the largest drain.
    context.out.Value(std::string(experiment) + "_rate_vs_batched", "x",
                      [&] { return largest_vs_around; });
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
