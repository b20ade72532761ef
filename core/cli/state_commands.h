// `lumen status` and `lumen list`: what a running cluster holds, as its head
// and node daemons report it, printed for people. Run on the calling (main)
// thread; every query to the cluster has its own deadline.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "lumen/cli/command_line.h"
#include "lumen/common/head_client.h"

namespace lumen::cli {

// Nodes, their resources used/total, object stores, workers, infeasible demand
// and placement groups that wait. Errors: the head cannot be resolved or reached.
[[nodiscard]] absl::Status RunStatus(const HeadQueryOptions& options);

// One line per node, actor, task, object or placement group. Errors: the head
// cannot be resolved or reached (a node that does not answer is reported on
// stderr and skipped).
[[nodiscard]] absl::Status RunList(const ListOptions& options);

// Rows as an aligned table whose columns are the union of the rows' keys, in
// first-seen order ("(none)" for no rows), on stdout.
void PrintTable(const std::vector<runtime::StateRow>& rows);

// "object store: 1.0 MiB / 64.0 MiB used, 3 objects; pinned ...; spilled ...;
// restored ..." for one node (memory_command.cc).
std::string StoreSummaryLine(const runtime::NodeView& node);

}  // namespace lumen::cli
