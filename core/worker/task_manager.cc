// TaskManager: complete, fail, the retry budget and the finished-task history.
// io thread.
#include "core/worker/task_manager.h"

#include <array>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/worker/call_sites.h"
#include "core/worker/pending_task_pool.h"
#include "lumen/common/proto_util.h"
#include "lumen/common/task_events.h"

namespace lumen::runtime {
namespace {

// FINISHED/FAILED's details: the latency, and the events folded into it.
// FINISHED takes over SUBMITTED's record when it can (submitted_mark).
TaskEventDetail EndDetail(PendingTask& task, const TaskExecution& execution = {}) {
  return {.node = task.lease_node,
          .worker_pid = task.lease_worker_pid,
          .actor_call = task.kind != proto::TaskKind::NORMAL,
          .since_tick = task.submitted_tick,
          .earlier_ticks = {task.dependencies_ready_tick, task.lease_tick},
          .execution = execution,
          .start = &task.submitted_mark};
}

// The executor's events a reply carries (none: started_us 0).
TaskExecution ExecutionIn(proto::TaskReply::Reader reply) {
  return {.started_us = reply.getStartedMicros(),
          .args_fetch_us = reply.getArgsFetchMicros(),
          .run_us = reply.getRunMicros(),
          .store_us = reply.getStoreMicros()};
}

// `known`, else the node a reply names (an actor's: a task's owner knows it
// from the lease).
NodeId NodeOr(const NodeId& known, proto::TaskReply::Reader reply) {
  if (!known.IsNil() || reply.getNodeId().size() != NodeId::kSize) return known;
  return IdFrom<NodeId>(reply.getNodeId());
}

// ExecutionIn, and where it ran into `task` when its lease did not say.
TaskExecution ExecutionOf(PendingTask& task, proto::TaskReply::Reader reply) {
  if (reply.getStartedMicros() == 0) return {};
  if (task.lease_worker_pid == 0) task.lease_worker_pid = reply.getWorkerPid();
  task.lease_node = NodeOr(task.lease_node, reply);
  return ExecutionIn(reply);
}

}  // namespace

void TaskManager::RecordFinished(PendingTask& task, const char* state) {
  if (task.kind == proto::TaskKind::ACTOR_CREATION) return;
  if (history_ == 0) return;
  if (finished_.size() < history_) {
    finished_.push_back(FinishedTask{task.task_id, task.name(), state});
    return;
  }
  // Full: the oldest record is reused, its name's buffer with it (no
  // allocation per task once the history is full).
  FinishedTask oldest = std::move(finished_.front());
  finished_.pop_front();
  oldest.id = task.task_id;
  oldest.name.assign(task.name());
  oldest.state = state;
  finished_.push_back(std::move(oldest));
}

void TaskManager::Complete(PendingTask& task, proto::TaskReply::Reader reply) {
  Complete(task, reply.getResult(), ExecutionOf(task, reply));
}

void TaskManager::Complete(PendingTask& task, proto::Value::Reader result) {
  Complete(task, result, TaskExecution{});
}

void TaskManager::RecordUnfinishedAttempt(const PendingTask& task, proto::TaskReply::Reader reply) {
  io_thread_.Check("TaskManager::RecordUnfinishedAttempt");
  RecordExecutionEvents(task.task_id, task.kind != proto::TaskKind::NORMAL, task.function,
                        task.lease_node, reply);
}

void RecordExecutionEvents(const TaskId& task, bool actor_call, std::string_view name,
                           const NodeId& node, proto::TaskReply::Reader reply) {
  if (reply.getStartedMicros() == 0 || !TaskEvents().enabled()) return;
  static constexpr std::array<TaskEventKind, 4> kKinds = {
      TaskEventKind::kStarted, TaskEventKind::kArgsFetched, TaskEventKind::kExecuted,
      TaskEventKind::kResultStored};
  const TaskExecution x = ExecutionIn(reply);
  const std::array<int64_t, 4> lengths = {0, x.args_fetch_us, x.run_us, x.store_us};
  int64_t at = x.started_us;
  for (size_t k = 0; k < kKinds.size(); ++k) {
    at += lengths[k];
    TaskEvent e{.kind = kKinds[k],
                .actor_call = actor_call,
                .attempt = reply.getAttempt(),
                .pid = reply.getWorkerPid(),
                .time_us = at,
                .task_id = task};
    if (k == 0) {
      e.name = name;
      e.node = NodeOr(node, reply);
    }
    TaskEvents().RecordEvent(e);
  }
}

void TaskManager::Complete(PendingTask& task, proto::Value::Reader result,
                           const TaskExecution& execution) {
  io_thread_.Check("TaskManager::Complete");
  RecordFinished(task, result.isError() ? "FAILED" : "FINISHED");
  if (result.isError()) {
    TaskEvents().Record(TaskEventKind::kFailed, task.task_id, task.attempt,
                        std::string_view(result.getError().getMessage().cStr()).substr(0, 200),
                        EndDetail(task, execution));
  } else {
    TaskEvents().Record(TaskEventKind::kFinished, task.task_id, task.attempt, {},
                        EndDetail(task, execution));
  }
  // Only a stored result is listed by `lumen memory`: an inline one costs no interning.
  const std::string* site =
      result.isStored() ? CallSites::Intern(absl::StrCat("task ", task.name())) : nullptr;
  store_.SetFromValue(task.return_id, result, /*owned_result=*/true, site);
}

void TaskManager::Fail(std::unique_ptr<PendingTask> task, Failure failure) {
  RecordFinished(*task, "FAILED");
  TaskEvents().Record(TaskEventKind::kFailed, task->task_id, task->attempt,
                      std::string_view(failure.message).substr(0, 200),
                      EndDetail(*task));
  store_.SetFailed(task->return_id, failure);
}

void TaskManager::Cancel(PendingTask& task, const std::string& how) {
  io_thread_.Check("TaskManager::Cancel");
  if (task.cancelled) return;
  task.cancelled = true;
  Failure failure{proto::FailureKind::OTHER, "lumen::TaskCancelledError",
                  absl::StrCat("task ", task.name(), " (", task.task_id.Hex().substr(0, 12),
                               ") was cancelled by lumen::Cancel", how),
                  "", /*cancelled=*/true};
  RecordFinished(task, "FAILED");
  TaskEvents().Record(TaskEventKind::kFailed, task.task_id, task.attempt,
                      std::string_view(failure.message).substr(0, 200),
                      EndDetail(task));
  store_.SetFailed(task.return_id, failure);
}

void TaskManager::Release(std::unique_ptr<PendingTask> task) {
  io_thread_.Check("TaskManager::Release");
  if (record_pool_ != nullptr) record_pool_->Give(std::move(task));
  // else `task` is destroyed here
}

void TaskManager::ReleasePlacement(std::unique_ptr<TaskPlacement> placement) {
  io_thread_.Check("TaskManager::ReleasePlacement");
  if (record_pool_ != nullptr) record_pool_->GivePlacement(std::move(placement));
  // else `placement` is destroyed here
}

void TaskManager::KeepLineage(std::unique_ptr<PendingTask> task) {
  io_thread_.Check("TaskManager::KeepLineage");
  if (lineage_sink_) lineage_sink_(std::move(task));
}

bool TaskManager::ConsumeRetry(PendingTask& task) {
  io_thread_.Check("TaskManager::ConsumeRetry");
  if (task.cancelled) return false;
  if (task.retries_left == 0) return false;
  if (task.retries_left > 0) --task.retries_left;
  ++task.attempt;
  return true;
}

}  // namespace lumen::runtime
