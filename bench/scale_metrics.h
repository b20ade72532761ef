// `lumen microbenchmark --scale`: how Lumen's costs grow with the work (issue
// 17), after Ray's release tests (1,000,000 queued tasks, many_actors,
// many_nodes). Each experiment runs on a cluster it starts itself on loopback:
//
//   drain_1_node / drain_3_nodes  N no-op tasks (10k, 30k, 100k, 300k, 1M)
//       submitted at once then drained with one Get; the rate against the
//       batched single_client_tasks_async rate; the driver's and daemons' peak
//       resident memory per queued task
//   actors   10,000 actors created and each called once (fewer when the
//            machine lacks memory, file descriptors or pids: said so)
//   puts     1,000,000 small objects Put then freed; owner and store memory
//            back to baseline
//   nodes    100 node daemons (1 CPU, small stores) joined to one head, a
//            STRICT_SPREAD placement group of 100 bundles, 10,000 tasks over
//            them; the head's CPU and memory per node
//
// Writes scale.csv and scale.png (drain time and memory against N, log-log)
// into `out_dir`. Runs on the calling (main) thread.
//
//   return lumen::bench::RunScaleBenchmark({.out_dir = "build"});
#pragma once

#include <string>

namespace lumen::bench {

struct ScaleOptions {
  bool quick = false;          // sizes up to 100k, 1,000 actors, 100k puts, 20 nodes
  long max_tasks = 1000000;    // the largest drain (`--scale-max-tasks`)
  // `--scale-only`: the experiments to run, comma-separated (drain, actors,
  // puts, nodes); empty: all.
  std::string only;
  std::string out_dir = ".";   // where scale.csv and scale.png go
};

// The build folder: the folder above this binary's bin/, else the binary's own.
std::string DefaultScaleOutDir();

// The process exit code: 0 when every experiment ran and checked out, else 1.
int RunScaleBenchmark(const ScaleOptions& options);

}  // namespace lumen::bench
