// The experiments of `lumen microbenchmark --scale` (bench/scale_metrics.h),
// one function each; each starts and stops its own cluster and adds its rows
// to the table. Internal to bench/. Main thread only.
#pragma once

#include <chrono>

#include "bench/reporter.h"
#include "bench/scale_metrics.h"
#include "bench/scale_table.h"

namespace lumen::bench {

struct ScaleContext {
  Reporter& out;
  ScaleTable& table;
  const ScaleOptions& options;
  std::chrono::milliseconds wait_timeout;  // LUMEN_BENCH_WAIT_TIMEOUT_MS
};

// drain_1_node and drain_3_nodes (scale_tasks.cc).
void RunDrainScale(ScaleContext& context);
// actors and puts (scale_actors.cc).
void RunActorScale(ScaleContext& context);
void RunPutScale(ScaleContext& context);
// store_puts: 1M small objects in one node's store; the daemon's bytes per object.
void RunStorePutScale(ScaleContext& context);

// What the many-nodes run measured (scale_many_nodes.cc); also run by
// test/core/many_nodes_test.cc.
struct ManyNodesResult {
  int nodes = 0;
  double start_seconds = 0;     // the daemons started and registered
  double group_seconds = 0;     // the STRICT_SPREAD group created
  double tasks_seconds = 0;     // the tasks submitted and drained
  int distinct_nodes = 0;       // nodes the tasks ran on
  double head_cpu_seconds = 0;  // the head's CPU time over the whole run
  double head_idle_cpu_per_second = 0;  // its CPU share with the cluster idle
  long head_rss_kib = 0;        // at the end
  long daemon_rss_kib = 0;      // mean over the node daemons
};
// Starts `nodes` daemons (1 CPU each, small stores) joined to one head, creates
// a STRICT_SPREAD group of `nodes` bundles of {CPU: 1}, runs `tasks` tasks over
// its bundles and checks that they ran on `nodes` distinct nodes. Throws
// (CheckFailure, lumen::Error) on failure; stops the cluster either way.
ManyNodesResult RunManyNodes(int nodes, int tasks, std::chrono::milliseconds wait_timeout);
void RunManyNodesScale(ScaleContext& context);

}  // namespace lumen::bench
