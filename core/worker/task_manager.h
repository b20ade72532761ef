// The task manager of one driver or worker process (Ray's TaskManager,
// smaller): how a task this process submitted ends. Completing it or failing
// it gives its return object its value in the MemoryStore and moves its name
// into the finished-task history (`lumen list tasks`); a retry takes one from
// its budget (max_retries) and bumps its attempt.
//
//   TaskManager tasks(memory_store);
//   if (!tasks.ConsumeRetry(*task)) tasks.Fail(std::move(task), failure);
//
// Only on the io thread (checked in debug builds; Fail also on the thread that
// destroys the runtime, which drops what is still queued). Internal to core/worker.
#pragma once

#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "core/worker/memory_store.h"
#include "core/worker/pending_task.h"
#include "lumen/common/ids.h"
#include "lumen/common/task_events.h"
#include "lumen/common/thread_checker.h"
#include "lumen/proto/lumen.capnp.h"

namespace lumen::runtime {

class PendingTaskPool;  // pending_task_pool.h

// Records the executor's events `reply` carries (none when it has no
// startedMicros: its worker recorded them, or events are off) as events of
// their own, in the worker's pid: for a reply that completes no
// FINISHED/FAILED (an actor's creation, an attempt that runs again).
// `node`: where it ran (nil: the reply's, an actor's); `name`: its function
// (empty: readers take the name its SUBMITTED gave). The io thread.
void RecordExecutionEvents(const TaskId& task, bool actor_call, std::string_view name,
                           const NodeId& node, proto::TaskReply::Reader reply);

class TaskManager {
 public:
  // A task that ended, as `lumen list tasks` shows it.
  struct FinishedTask {
    TaskId id;
    std::string name;
    const char* state;  // "FINISHED" or "FAILED" (a literal)
  };
  static constexpr size_t kDefaultHistory = 1000;

  // `store` outlives the manager; `history`: how many finished tasks are kept.
  explicit TaskManager(MemoryStore& store, size_t history = kDefaultHistory)
      : store_(store), history_(history) {}
  TaskManager(const TaskManager&) = delete;
  TaskManager& operator=(const TaskManager&) = delete;

  // The task ran: its return object gets `result` (a value or the task's
  // error), as a result this process owns.
  void Complete(PendingTask& task, proto::Value::Reader result);
  // The same for the worker's `reply`, whose execution times (TaskExecution:
  // the worker's STARTED to RESULT_STORED, when it sent them) the task's
  // FINISHED/FAILED event carries.
  void Complete(PendingTask& task, proto::TaskReply::Reader reply);
  // The attempt `reply` answers ended without a FINISHED/FAILED to carry its
  // executor's events (it threw and runs again, or was cancelled while it
  // ran): they are recorded as events of their own (RecordExecutionEvents).
  void RecordUnfinishedAttempt(const PendingTask& task, proto::TaskReply::Reader reply);
  // The task fails for good with `failure`; it is destroyed here (which
  // releases its argument refs).
  void Fail(std::unique_ptr<PendingTask> task, Failure failure);
  // Its worker died (or it threw, with retry_exceptions): true (and the next
  // attempt numbered) while its retry budget lasts (max_retries -1: always),
  // false once it is spent or the task was cancelled.
  [[nodiscard]] bool ConsumeRetry(PendingTask& task);
  // lumen::Cancel: the task's return object fails now with TaskCancelledError
  // (`how` ends the message) and the task is marked cancelled; its holder
  // keeps it (a worker may still be running it) and drops it without a
  // result when the worker answers or dies.
  void Cancel(PendingTask& task, const std::string& how);

  // Where a completed task goes when its holder is done with it: the lineage
  // of its return object (ObjectRecovery::KeepLineage), which keeps a normal
  // task whose result was stored so that it can run again if that object is
  // lost. Unset: the task is destroyed.
  using LineageSink = std::function<void(std::unique_ptr<PendingTask>)>;
  void SetLineageSink(LineageSink sink) { lineage_sink_ = std::move(sink); }
  // Hands `task`, completed with a value stored in a node's store, to the
  // lineage sink (or destroys it, which releases its argument refs).
  void KeepLineage(std::unique_ptr<PendingTask> task);
  // Where ended tasks' records go for reuse (pending_task_pool.h); unset: they
  // are destroyed. The pool outlives the manager.
  void SetRecordPool(PendingTaskPool* pool) { record_pool_ = pool; }
  // `task` has ended and nothing keeps it: its argument refs are released now
  // and its record goes back to the pool.
  void Release(std::unique_ptr<PendingTask> task);
  // A queued task's placement, read by its scheduling queue: it goes back to
  // the submitting thread with a record (PendingTaskPool::GivePlacement).
  void ReleasePlacement(std::unique_ptr<TaskPlacement> placement);

  // The last finished tasks, oldest first.
  const std::deque<FinishedTask>& finished() const { return finished_; }

 private:
  // Complete's, with the executor's events (none: started_us 0).
  void Complete(PendingTask& task, proto::Value::Reader result, const TaskExecution& execution);
  void RecordFinished(PendingTask& task, const char* state);

  MemoryStore& store_;
  const size_t history_;
  ThreadChecker io_thread_;
  std::deque<FinishedTask> finished_;
  LineageSink lineage_sink_;
  PendingTaskPool* record_pool_ = nullptr;
};

}  // namespace lumen::runtime
