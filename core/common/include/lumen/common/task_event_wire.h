// Task events on the wire: a batch of lumen::TaskEvent to and from a
// proto::TaskEventBatch (lumen.capnp), for the flush from a process to its node
// and the node's answer to `lumen timeline`.
//
//   TaskEventsToProto(events, env.initTaskEvents());
//   std::vector<TaskEvent> back = TaskEventsFromProto(msg.getTaskEvents());
//
// Pure functions, thread-safe. Reading never throws beyond what Cap'n Proto's
// readers throw for a malformed message; an unknown kind is skipped.
#pragma once

#include <vector>

#include "lumen/common/task_events.h"
#include "lumen/proto/lumen.capnp.h"

namespace lumen {

// Fills `out` (its events list) from `events`.
void TaskEventsToProto(const std::vector<TaskEvent>& events, proto::TaskEventBatch::Builder out);
// The events of `batch`, in order.
std::vector<TaskEvent> TaskEventsFromProto(proto::TaskEventBatch::Reader batch);

}  // namespace lumen
