// `lumen start`: a detached head and node daemon (--head), or one more node
// daemon joined to a running head (--address); both stay until `lumen stop`.
// Runs on the calling (main) thread; blocks until the new node is listed by the
// head (or a deadline passes).
#pragma once

#include "absl/status/status.h"
#include "lumen/cli/command_line.h"

namespace lumen::cli {

// Starts the processes `options` ask for and prints how to reach them. Errors:
// the head cannot be resolved or the processes cannot be started.
[[nodiscard]] absl::Status RunStart(const StartOptions& options);

}  // namespace lumen::cli
