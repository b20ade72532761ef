// The object metrics of `lumen microbenchmark`: puts and gets through the
// node's store (Ray's `_Plasma_Store` names) and inline, put bandwidth from one
// and from several clients, and a get of an object holding 10,000 refs.
// doc/benchmark.md gives each metric's Ray definition.
//
//   RunObjectMetrics(out, quick);   // after lumen::Init, on the main thread
#pragma once

#include "bench/reporter.h"

namespace lumen::bench {

// Ray's gigabyte: Ray counts its 800 MiB array (838,860,800 bytes) as 0.8, so
// one "GB" of the `_gigabytes` metrics is 1000 MiB.
inline constexpr double kRayGigabyte = 1000.0 * 1024 * 1024;

// The size of the large array put by single_client_put_gigabytes (Ray's 100 Mi
// int64 values, a tenth in --quick mode); lumen::Init's store must hold a few.
uint64_t LargePutBytes(bool quick);

// Measures and prints the object metrics on the cluster lumen::Init started.
void RunObjectMetrics(Reporter& out, bool quick);

// Of those, single_client_put_gigabytes and its bound memcpy_gigabytes only
// (also run by bench/store_bench.cc).
void RunLargePutMetrics(Reporter& out, bool quick);

}  // namespace lumen::bench
