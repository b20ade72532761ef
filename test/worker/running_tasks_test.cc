// RunningTasks: which side records a running task's STARTED, under a race
// between the executor thread ending tasks and a flusher recording them.
#include "core/worker/running_tasks.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "lumen/common/task_events.h"

namespace lumen::runtime {
namespace {

// Invariant: for every task exactly one side records its STARTED: a flush
// that found it running (RecordStarted; the executor's End then says so) or
// none (End false: its reply carries its events). Never both, never twice,
// whatever the interleaving, and the flush reads the fields of the task it
// claimed (its id and attempt, its name, its start tick).
TEST_CASE("a running task's STARTED is recorded once, by a flush or by no one") {
  TaskEventRecorder recorder(1 << 20);
  RunningTasks running;
  constexpr int kTasks = 20000;
  std::vector<TaskId> ids(kTasks);
  for (TaskId& id : ids) id = TaskId::Random();
  const std::string name = "Fit";
  std::vector<char> ended_recorded(kTasks, 0);
  std::atomic<bool> done{false};
  std::thread executor([&] {
    RunningTasks::Entry& mine = running.EntryOfThisThread();
    for (int i = 0; i < kTasks; ++i) {
      mine.Begin(ids[i], static_cast<uint32_t>(i), &name, i % 2 == 1, 1000 + i);
      ended_recorded[i] = mine.End() ? 1 : 0;
    }
    done = true;
  });
  size_t flushed = 0;
  while (!done) flushed += running.RecordStarted(recorder);
  executor.join();
  CHECK(running.RecordStarted(recorder) == 0);  // nothing runs

  std::map<TaskId, int> started;  // task -> its index
  std::map<int, int> times;
  for (const TaskEvent& e : recorder.Drain()) {
    REQUIRE(e.kind == TaskEventKind::kStarted);
    REQUIRE(e.attempt < static_cast<uint32_t>(kTasks));
    CHECK(e.task_id == ids[e.attempt]);
    CHECK(e.name == "Fit");
    CHECK(e.actor_call == (e.attempt % 2 == 1));
    ++times[static_cast<int>(e.attempt)];
    started[e.task_id] = static_cast<int>(e.attempt);
  }
  CHECK(started.size() == flushed);
  size_t by_end = 0;
  for (int i = 0; i < kTasks; ++i) {
    INFO("task " << i);
    const bool recorded = started.contains(ids[i]);
    REQUIRE(recorded == (ended_recorded[i] == 1));
    if (recorded) CHECK(times[i] == 1);
    by_end += ended_recorded[i];
  }
  CHECK(by_end == flushed);
  INFO("tasks a flush found running: " << flushed << " of " << kTasks);
}

// Invariant: each thread has its own entry, kept for its later calls; a flush
// records every thread's running task.
TEST_CASE("each executor thread has an entry of its own") {
  TaskEventRecorder recorder(64);
  RunningTasks running;
  RunningTasks::Entry& here = running.EntryOfThisThread();
  CHECK(&running.EntryOfThisThread() == &here);
  const std::string name = "Step";
  const TaskId a = TaskId::Random(), b = TaskId::Random();
  here.Begin(a, 0, &name, false, 1);
  RunningTasks::Entry* there = nullptr;
  std::thread other([&] {
    there = &running.EntryOfThisThread();
    there->Begin(b, 0, &name, false, 2);
  });
  other.join();
  CHECK(there != &here);
  CHECK(running.RecordStarted(recorder) == 2);
  CHECK(here.End());
  CHECK(there->End());
  here.Begin(a, 1, &name, false, 3);
  CHECK_FALSE(here.End());
  CHECK(recorder.Drain().size() == 2);
}

}  // namespace
}  // namespace lumen::runtime
