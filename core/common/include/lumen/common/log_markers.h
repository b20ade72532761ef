// Markers a worker writes into its own stdout and stderr so that its node
// daemon, which reads both through pipes, knows which task or actor wrote the
// lines that follow (Ray's ":task_name:" lines, in the same spirit). A marker
// is one line of its own, written with one write(2) (atomic on a pipe), and
// never reaches a file or a driver: the daemon consumes it.
//
//   "\x1flumen:task:Fit\n"      lines after it come from task Fit
//   "\x1flumen:actor:trainer\n" lines after it come from actor "trainer"
//
// Workers write markers only when LUMEN_LOG_MARKERS=1 (their daemon reads
// their output); core/worker/output_tagger.h writes them,
// core/node/worker_log_router.h reads them.
#pragma once

#include <string_view>

namespace lumen {

inline constexpr std::string_view kLogMarkerTask = "\x1flumen:task:";
inline constexpr std::string_view kLogMarkerActor = "\x1flumen:actor:";
inline constexpr const char* kLogMarkersEnv = "LUMEN_LOG_MARKERS";

}  // namespace lumen
