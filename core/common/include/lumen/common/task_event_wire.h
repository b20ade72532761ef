// Task events on the wire: a proto::TaskEventBatch carries them packed
// (TaskEventBatch.packed: a version byte, then the records of
// lumen/common/task_event_packed.h), for the flush from a process to its node
// and the node's answer to `lumen timeline`.
//
//   SetPackedEvents(records, env.initTaskEvents());        // records from DrainPacked
//   auto records = PackedEventsOf(msg.getTaskEvents());     // the node: kept as they came
//   auto back = TaskEventsFromProto(msg.getTaskEvents());   // decoded (the cli, tests)
//
// Pure functions, thread-safe. Readers return an error for a packed version
// they do not know or a malformed record, never throw for them; the old
// per-event list (`events`) is still read.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "lumen/common/task_events.h"
#include "lumen/proto/lumen.capnp.h"

namespace lumen {

// Sets `out`'s packed events to `records` (packed records, no version byte).
void SetPackedEvents(std::string_view records, proto::TaskEventBatch::Builder out);
// Sets `out`'s packed events to `*blob` (packed_events::ToBlob's form: the
// version byte, then the records) without copying it: the message refers to
// it, so `*blob` must stay unchanged (and alive) until the message is written
// out or dropped. Zero-pads its memory to whole words (the message carries
// the last word whole) without changing its size.
void ReferencePackedBlob(std::string* blob, proto::TaskEventBatch::Builder out);
// Packs `events` into `out`.
void TaskEventsToProto(const std::vector<TaskEvent>& events, proto::TaskEventBatch::Builder out);

// The packed records of `batch` (a copy: the node keeps it as it is), the old list packed when it
// has one; an error for an unknown version.
absl::StatusOr<std::string> PackedEventsOf(proto::TaskEventBatch::Reader batch);
// The events of `batch`, in order.
absl::StatusOr<std::vector<TaskEvent>> TaskEventsFromProto(proto::TaskEventBatch::Reader batch);

}  // namespace lumen
