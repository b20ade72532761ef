// `lumen logs [--node N] [--worker PID | --actor NAME]`: prints what the
// cluster's workers wrote to stdout and stderr, from the per-worker files each
// node daemon keeps (<session>/logs/worker-<pid>.out|.err), one block per
// file. Runs on the calling (main) thread; every query has its own deadline.
#pragma once

#include "absl/status/status.h"
#include "lumen/cli/command_line.h"

namespace lumen::cli {

// Errors: the head cannot be resolved or reached; NotFound when --node names
// no node, or when --worker/--actor match no file (a node that does not
// answer is reported on stderr and skipped).
[[nodiscard]] absl::Status RunLogs(const LogsOptions& options);

}  // namespace lumen::cli
