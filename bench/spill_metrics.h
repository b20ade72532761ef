// The spilling metrics of `lumen microbenchmark`: how fast a full store writes
// objects to disk and reads them back, next to a plain file write and read of
// the same bytes in the same directory (the disk's limit). Measured on a
// StoreServer in this process (the node daemon's store, without the sockets),
// spilling under $TMPDIR; doc/benchmark.md describes each metric.
//
//   RunSpillMetrics(out, quick);   // no cluster needed
#pragma once

#include "bench/reporter.h"

namespace lumen::bench {

// spill_gigabytes, restore_gigabytes, disk_write_gigabytes, disk_read_gigabytes,
// disk_write_just_freed_gigabytes.
void RunSpillMetrics(Reporter& out, bool quick);

}  // namespace lumen::bench
