// `lumen microbenchmark`: Ray's microbenchmark metrics (python/ray/_private/
// ray_perf.py), measured as Ray measures them on an embedded local cluster,
// plus Lumen's own (multi-node, collective). doc/benchmark.md lists every
// metric and its Ray definition.
//
//   return lumen::bench::RunMicrobenchmark({.quick = true});
//
// Prints one line per metric: `name mean +- stddev unit` over timed trials
// (Ray's timeit), or `name value unit` for a single measurement; `# ...` lines
// are notes (what is not measured, and why). Runs on the calling (main)
// thread; starts and stops its own clusters.
#pragma once

#include <optional>

namespace lumen::bench {

struct MicrobenchmarkOptions {
  bool quick = false;  // shorter trials, smaller batches and objects (`--quick`)
  // Set: run as one of the extra driver processes of multi_driver_tasks_async
  // for this many seconds (`--client SECONDS`, how the benchmark re-executes
  // itself), instead of the benchmark.
  std::optional<double> client_seconds;
  // Only the cost of task events (`--task-events`): the task and actor-call
  // rates with events on and off (bench/task_events_overhead.h).
  bool task_events = false;
};

// The process exit code: 0 when every metric was measured and every result
// checked out; 1 otherwise (each failure is named on stderr).
int RunMicrobenchmark(const MicrobenchmarkOptions& options);

}  // namespace lumen::bench
