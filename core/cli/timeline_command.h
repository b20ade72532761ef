// `lumen timeline FILE`: asks every live node of the cluster for the task
// events it keeps and writes them as a Chrome trace (lumen/cli/timeline.h).
// Runs on the calling (main) thread; every query has its own deadline.
#pragma once

#include "absl/status/status.h"
#include "lumen/cli/command_line.h"

namespace lumen::cli {

// Errors: the head cannot be resolved or reached, or FILE cannot be written (a
// node that does not answer is reported on stderr and left out).
[[nodiscard]] absl::Status RunTimeline(const TimelineOptions& options);

}  // namespace lumen::cli
