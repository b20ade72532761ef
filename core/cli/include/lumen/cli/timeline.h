// `lumen timeline`: the task events of a cluster as a Chrome trace (the
// `traceEvents` JSON that Perfetto and chrome://tracing load).
//
//   std::vector<runtime::NodeTaskEvents> nodes = ...;   // QueryTaskEvents per node
//   std::string json = lumen::cli::BuildChromeTrace(nodes);
//
// The trace: one process row per node ("node 1a2b3c4d5e6f"), one thread row
// per process of that node that recorded events ("worker pid 123", "driver pid
// 99", "node daemon"); one complete ("X") slice per task attempt that started,
// on its executor's row, named after the function, with its phases in `args`
// (dependency_wait_ms, lease_wait_ms, arg_fetch_ms, execution_ms,
// result_store_ms), its task id, attempt, status and error; a short "submit"
// slice on the submitter's row and a flow arrow from it to the task's slice;
// one slice per object pull on the node daemon's row (bytes, MB/s).
//
// Pure and thread-safe; the JSON is built with Boost.JSON.
#pragma once

#include <string>
#include <vector>

#include "lumen/common/head_client.h"

namespace lumen::cli {

// The trace of `nodes`' events, as JSON text.
std::string BuildChromeTrace(const std::vector<runtime::NodeTaskEvents>& nodes);

}  // namespace lumen::cli
