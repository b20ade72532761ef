#include "core/node/recent_failures.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "lumen/common/proto_util.h"

namespace lumen::node {

void RecentFailures::OnTaskEvents(const std::vector<TaskEvent>& events) {
  io_thread_.Check("RecentFailures");
  for (const TaskEvent& e : events) {
    if (e.kind != TaskEventKind::kFailed) continue;
    Add(Failure{.time_us = e.time_us,
                .kind = e.actor_call ? "actor call" : "task",
                .task_id = e.task_id,
                .message = e.name,
                .pid = e.pid});
  }
}

void RecentFailures::OnWorkerExit(const std::string& kill_reason, const WorkerExit& exit) {
  io_thread_.Check("RecentFailures");
  if (!kill_reason.empty() || exit.exit_code == 0) return;
  Add(Failure{.time_us = TaskEventRecorder::NowMicros(),
              .kind = "worker",
              .task_id = TaskId(),
              .message = absl::StrCat("worker pid ", exit.pid, " ", exit.cause),
              .pid = exit.pid});
}

void RecentFailures::Add(Failure failure) {
  failures_.push_back(std::move(failure));
  while (failures_.size() > kMaxFailures) failures_.pop_front();
}

void RecentFailures::Fill(proto::NodeDashboard::Builder out) const {
  io_thread_.Check("RecentFailures");
  auto list = out.initFailures(static_cast<unsigned>(failures_.size()));
  unsigned i = 0;
  for (const Failure& f : failures_) {
    auto r = list[i++];
    r.setTimeUs(f.time_us);
    r.setKind(f.kind);
    if (!f.task_id.IsNil()) r.setTaskId(DataOf(f.task_id));
    r.setMessage(f.message);
    r.setPid(f.pid);
  }
}

}  // namespace lumen::node
