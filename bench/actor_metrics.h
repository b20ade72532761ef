// The actor metrics of `lumen microbenchmark`: calls from the driver to one
// actor (sync, async, concurrent), from a client actor to several, from
// several client tasks over shared actors, with a store-object argument, and
// actor creation. doc/benchmark.md gives each metric's Ray definition.
//
//   RunActorMetrics(out, quick);   // after lumen::Init, on the main thread
#pragma once

#include "bench/reporter.h"

namespace lumen::bench {

// Measures and prints the actor metrics on the cluster lumen::Init started.
// Actors are created before each metric's timing starts.
void RunActorMetrics(Reporter& out, bool quick);

}  // namespace lumen::bench
