// The multi-node metrics of `lumen microbenchmark` (Lumen's, not in Ray's
// microbenchmark): a head and three node daemons on loopback, this process the
// driver on the first; tasks spread over the nodes, and an array made on
// another node read here against the loopback socket bound.
//
//   RunMultiNodeMetrics(out, quick, timeouts.bench_wait_timeout);  // not Init'ed
#pragma once

#include <chrono>

#include "bench/reporter.h"

namespace lumen::bench {

// Starts the cluster, measures, stops it (every process and store it made).
// The driver attaches only once all three nodes are registered, waiting at most
// `wait_timeout`. Must be called while this process is not lumen::Init'ed.
void RunMultiNodeMetrics(Reporter& out, bool quick, std::chrono::milliseconds wait_timeout);

}  // namespace lumen::bench
