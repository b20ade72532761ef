// `lumen stop`: stops every cluster process `lumen start` started on this
// machine (node daemons first, then heads) and removes their session
// directories. Runs on the calling (main) thread.
#pragma once

#include "absl/status/status.h"

namespace lumen::cli {

// Prints how many processes were stopped. Never fails today: a process that is
// already gone is skipped.
[[nodiscard]] absl::Status RunStop();

}  // namespace lumen::cli
