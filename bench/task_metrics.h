// The task metrics of `lumen microbenchmark`: tasks submitted one at a time and
// in batches, from the driver and from client actors, Ray's wait on 1,000 refs,
// and placement groups created and removed. doc/benchmark.md gives each
// metric's Ray definition.
//
//   RunTaskMetrics(out, quick);   // after lumen::Init, on the main thread
#pragma once

#include <chrono>

#include "bench/reporter.h"

namespace lumen::bench {

// The custom resource (and its amount) lumen::Init's node must offer for the
// placement group metric: Ray's `ray.init(resources={"custom": 100})`.
inline constexpr const char* kCustomResource = "custom";
inline constexpr double kCustomResourceAmount = 100;

// Measures and prints the task metrics on the cluster lumen::Init started.
// `wait_timeout`: how long a placement group may take to be placed.
void RunTaskMetrics(Reporter& out, bool quick, std::chrono::milliseconds wait_timeout);

}  // namespace lumen::bench
