#include "lumen/common/task_event_wire.h"

#include "lumen/common/proto_util.h"

namespace lumen {

void TaskEventsToProto(const std::vector<TaskEvent>& events, proto::TaskEventBatch::Builder out) {
  auto list = out.initEvents(static_cast<unsigned>(events.size()));
  for (size_t i = 0; i < events.size(); ++i) {
    const TaskEvent& e = events[i];
    auto r = list[static_cast<unsigned>(i)];
    r.setKind(static_cast<uint8_t>(e.kind));
    r.setActorCall(e.actor_call);
    r.setAttempt(e.attempt);
    r.setPid(e.pid);
    r.setTimeUs(e.time_us);
    if (!e.task_id.IsNil()) r.setTaskId(DataOf(e.task_id));
    if (!e.name.empty()) r.setName(e.name);
    if (!e.node.IsNil()) r.setNodeId(DataOf(e.node));
    if (!e.worker.IsNil()) r.setWorkerId(DataOf(e.worker));
    r.setWorkerPid(e.worker_pid);
    r.setBytes(e.bytes);
    r.setDurationUs(e.duration_us);
  }
}

std::vector<TaskEvent> TaskEventsFromProto(proto::TaskEventBatch::Reader batch) {
  std::vector<TaskEvent> out;
  auto list = batch.getEvents();
  out.reserve(list.size());
  for (auto r : list) {
    if (r.getKind() >= kNumTaskEventKinds) continue;
    TaskEvent e;
    e.kind = static_cast<TaskEventKind>(r.getKind());
    e.actor_call = r.getActorCall();
    e.attempt = r.getAttempt();
    e.pid = r.getPid();
    e.time_us = r.getTimeUs();
    e.task_id = IdFrom<TaskId>(r.getTaskId());
    e.name = r.getName().cStr();
    e.node = IdFrom<NodeId>(r.getNodeId());
    e.worker = IdFrom<WorkerId>(r.getWorkerId());
    e.worker_pid = r.getWorkerPid();
    e.bytes = r.getBytes();
    e.duration_us = r.getDurationUs();
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace lumen
