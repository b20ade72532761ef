// RunningTasks: the task each executor thread runs now, for the worker's task
// events. A task's STARTED, ARGS_FETCHED, EXECUTED and RESULT_STORED travel in
// its reply to the owner (TaskExecution, task_events.h), which records them
// with its FINISHED: a worker records nothing per task. Only a task still
// running when the worker's events are flushed is recorded here, its STARTED
// then (so that a long task shows as running in `/metrics` and `lumen
// timeline` before it ends), and its RESULT_STORED by the executor at its end.
//
//   RunningTasks::Entry& mine = running.EntryOfThisThread();     // executor thread
//   mine.Begin(task.task_id, task.attempt, &task.function, actor_call, TaskEventClock::Now());
//   ... run it ...
//   if (mine.End()) { /* a flush recorded STARTED: record RESULT_STORED here */ }
//   running.RecordStarted(TaskEvents());   // the flusher, before each drain
//
// Thread-safe. An entry's state decides which side records a task's STARTED,
// exactly one of the executor's End and a flush's RecordStarted; End waits
// for a RecordStarted under way (it reads the task's fields). Internal to
// core/worker.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "lumen/common/ids.h"
#include "lumen/common/task_events.h"

namespace lumen::runtime {

class RunningTasks {
 public:
  // One executor thread's task. Begin and End on that thread only.
  class Entry {
   public:
    // A task starts: `function` must stay valid until End returns.
    void Begin(const TaskId& task, uint32_t attempt, const std::string* function, bool actor_call,
               uint64_t start_tick);
    // The task ended: false when its events are the reply's to carry; true
    // when a flush recorded its STARTED (this thread then records the rest).
    [[nodiscard]] bool End();

   private:
    friend class RunningTasks;
    enum State : uint8_t {
      kIdle,
      kRunning,   // Begin published the fields below
      kClaimed,   // a flush is recording STARTED from them
      kRecorded,  // it did
    };
    std::atomic<uint8_t> state_{kIdle};
    // Written by Begin before kRunning; read by RecordStarted after it
    // claims the entry (the state's release and acquire order them).
    TaskId task_;
    uint32_t attempt_ = 0;
    const std::string* function_ = nullptr;
    bool actor_call_ = false;
    uint64_t start_tick_ = 0;
  };

  RunningTasks() = default;
  RunningTasks(const RunningTasks&) = delete;
  RunningTasks& operator=(const RunningTasks&) = delete;

  // The calling thread's entry in this registry, made at its first call; it
  // lives as long as the registry.
  Entry& EntryOfThisThread();
  // Records STARTED (on the calling thread, with the recording process's
  // node and worker) for every task running now whose STARTED no flush
  // recorded yet. Returns how many.
  size_t RecordStarted(TaskEventRecorder& recorder);

 private:
  const uint64_t id_ = NextId();  // the key of the threads' cached entry
  static uint64_t NextId();
  absl::Mutex mu_;
  std::vector<std::unique_ptr<Entry>> entries_ ABSL_GUARDED_BY(mu_);
};

}  // namespace lumen::runtime
