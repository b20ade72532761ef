// `lumen status` and `lumen list`: what a running cluster holds, as its head
// and node daemons report it, printed for people. Run on the calling (main)
// thread; every query to the cluster has its own deadline.
#pragma once

#include "absl/status/status.h"
#include "lumen/cli/command_line.h"

namespace lumen::cli {

// Nodes, their resources used/total, object stores, workers, infeasible demand
// and placement groups that wait. Errors: the head cannot be resolved or reached.
[[nodiscard]] absl::Status RunStatus(const HeadQueryOptions& options);

// One line per node, actor, task, object or placement group. Errors: the head
// cannot be resolved or reached (a node that does not answer is reported on
// stderr and skipped).
[[nodiscard]] absl::Status RunList(const ListOptions& options);

}  // namespace lumen::cli
