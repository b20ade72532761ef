// What one small object costs the node daemon while it is in the store:
// `bytes_per_small_object` of `lumen microbenchmark` and the `store_puts`
// experiment of `--scale` (one million objects). Issue 11's target: <= 256 B.
//
//   SmallObjectCost cost = MeasureSmallObjects(EmbeddedNodeDaemon(), 200000);
//   printf("%.0f B per object\n", cost.bytes_per_object);
//
// Main thread of a driver after lumen::Init; throws CheckFailure (bench/check.h)
// or lumen::Error when a put fails.
#pragma once

#include <sys/types.h>

namespace lumen::bench {

struct SmallObjectCost {
  long objects = 0;
  double seconds = 0;           // to put them all
  double bytes_per_object = 0;  // growth of the daemon's RssAnon over `objects`
  long daemon_kib_before = 0;   // its RssAnon before the puts
  long daemon_kib_after = 0;    // ... with every object still in the store
};

// Puts `n` small values (an int each) into the node's store through the store
// path (bench/store_put.h) from `threads` threads, each put after put (a put
// is two round trips to the daemon: several threads keep several in flight),
// holding every reference, then reads the anonymous resident memory of
// `daemon` (RssAnon: its heap and tables, not the store's shared pages) before
// and after; the objects are freed on return.
SmallObjectCost MeasureSmallObjects(pid_t daemon, long n, int threads = 1);

// The threads bytes_per_small_object and --scale's store_puts put from.
inline constexpr int kSmallObjectPutThreads = 8;

// The node daemon of the embedded cluster this driver started (its child with
// LUMEN_ROLE=node in its environment); 0 when there is none.
pid_t EmbeddedNodeDaemon();

}  // namespace lumen::bench
