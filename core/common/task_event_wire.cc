#include "lumen/common/task_event_wire.h"

#include <algorithm>
#include <cstring>

#include <capnp/orphan.h>

#include "lumen/common/proto_util.h"
#include "lumen/common/task_event_packed.h"

namespace lumen {
namespace {

// One record of the old per-event list, packed.
void AppendOldRecord(proto::TaskEventRecord::Reader r, packed_events::Writer& out) {
  if (r.getKind() >= kNumTaskEventKinds) return;  // the old reader skipped them too
  TaskId task = IdFrom<TaskId>(r.getTaskId());
  NodeId node = IdFrom<NodeId>(r.getNodeId());
  WorkerId worker = IdFrom<WorkerId>(r.getWorkerId());
  auto name = r.getName();
  out.Append(packed_events::Fields{.kind = static_cast<TaskEventKind>(r.getKind()),
                                              .actor_call = r.getActorCall(),
                                              .attempt = r.getAttempt(),
                                              .pid = r.getPid(),
                                              .time_us = r.getTimeUs(),
                                              .task = &task,
                                              .node = &node,
                                              .worker = &worker,
                                              .worker_pid = r.getWorkerPid(),
                                              .bytes = r.getBytes(),
                                              .duration_us = r.getDurationUs(),
                                              .name = std::string_view(name.cStr(), name.size())});
}

}  // namespace

void SetPackedEvents(std::string_view records, proto::TaskEventBatch::Builder out) {
  auto data = out.initPacked(static_cast<unsigned>(records.size() + 1));
  data[0] = packed_events::kVersion;
  if (!records.empty()) std::memcpy(data.begin() + 1, records.data(), records.size());
}

void ReferencePackedBlob(std::string* blob, proto::TaskEventBatch::Builder out) {
  const size_t size = blob->size();
  // Heap memory (malloc's alignment): an inline short string may not be word-aligned.
  blob->reserve(std::max<size_t>(size + 8, 32));
  blob->append(8, '\0');
  blob->resize(size);
  auto orphan = capnp::Orphanage::getForMessageContaining(out).referenceExternalData(
      capnp::Data::Reader(reinterpret_cast<const kj::byte*>(blob->data()), size));
  out.adoptPacked(kj::mv(orphan));
}

void TaskEventsToProto(const std::vector<TaskEvent>& events, proto::TaskEventBatch::Builder out) {
  std::string records;
  packed_events::Writer writer(&records);
  for (const TaskEvent& e : events) writer.Append(packed_events::FieldsOf(e));
  SetPackedEvents(records, out);
}

absl::StatusOr<std::string> PackedEventsOf(proto::TaskEventBatch::Reader batch) {
  std::string records;
  if (batch.hasPacked()) {
    auto data = batch.getPacked();
    auto view = packed_events::RecordsOfBlob(
        std::string_view(reinterpret_cast<const char*>(data.begin()), data.size()));
    if (!view.ok()) return view.status();
    records.assign(view->data(), view->size());
  }
  packed_events::Writer writer(&records);
  for (auto r : batch.getEvents()) AppendOldRecord(r, writer);
  return records;
}

absl::StatusOr<std::vector<TaskEvent>> TaskEventsFromProto(proto::TaskEventBatch::Reader batch) {
  auto records = PackedEventsOf(batch);
  if (!records.ok()) return records.status();
  return packed_events::Decode(*records);
}

}  // namespace lumen
