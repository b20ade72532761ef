// `lumen microbenchmark`: Ray's microbenchmark metrics, measured on an embedded
// local cluster. Prints one line per metric: `name value unit`.
//
//   return lumen::bench::RunMicrobenchmark({.quick = true});
//
// Runs on the calling (main) thread; starts and stops its own clusters.
#pragma once

#include <optional>

namespace lumen::bench {

struct MicrobenchmarkOptions {
  bool quick = false;  // shorter runs and smaller objects (`--quick`)
  // Set: run as one of the extra driver processes of multi_client_tasks_async
  // for this many seconds (`--client SECONDS`, how the benchmark re-executes
  // itself), instead of the benchmark.
  std::optional<double> client_seconds;
};

// The process exit code: 0 when every metric was measured.
int RunMicrobenchmark(const MicrobenchmarkOptions& options);

}  // namespace lumen::bench
