// `lumen memory [--top N]` (Ray's `ray memory`): per node, what its object
// store holds (bytes used of its capacity, objects, pinned, spilled to disk,
// restored), then the N largest objects of the cluster with their size, the
// node holding them, state (pinned, spilled), owner (driver or worker pid and
// node), where they were created (a Put call site or a task name) and the
// owner's reference counts. The stores list their largest objects, the owners
// theirs; the rows are joined here by object id. Runs on the calling (main)
// thread; every query has its own deadline.
#pragma once

#include "absl/status/status.h"
#include "lumen/cli/command_line.h"

namespace lumen::cli {

// Errors: the head cannot be resolved or reached (a node that does not answer
// is reported on stderr and skipped).
[[nodiscard]] absl::Status RunMemory(const MemoryOptions& options);

}  // namespace lumen::cli
