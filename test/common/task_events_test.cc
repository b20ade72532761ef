// TaskEventRecorder (the per-process ring) and the wire form of its events.
#include "lumen/common/task_events.h"

#include <catch2/catch.hpp>

#include "lumen/common/connection.h"
#include "lumen/common/task_event_wire.h"

namespace lumen {
namespace {

// Invariant: Drain returns what was recorded since the last Drain, oldest
// first; a full ring keeps the newest events and counts the ones it dropped.
TEST_CASE("the task event ring keeps the newest events and counts the dropped") {
  TaskEventRecorder recorder(/*capacity=*/3);
  TaskId a = TaskId::Random(), b = TaskId::Random();
  recorder.Record(TaskEventKind::kSubmitted, a, 0, "first");
  recorder.Record(TaskEventKind::kDependenciesReady, a, 0);
  auto two = recorder.Drain();
  REQUIRE(two.size() == 2);
  CHECK(two[0].kind == TaskEventKind::kSubmitted);
  CHECK(two[0].name == "first");
  CHECK(two[0].pid > 0);
  CHECK(two[0].time_us > 0);
  CHECK(two[1].time_us >= two[0].time_us);
  CHECK(recorder.Drain().empty());

  for (uint32_t attempt = 0; attempt < 5; ++attempt) {
    recorder.Record(TaskEventKind::kStarted, b, attempt, "f", {.worker_pid = 7});
  }
  auto kept = recorder.Drain();
  REQUIRE(kept.size() == 3);
  CHECK(kept[0].attempt == 2);
  CHECK(kept[2].attempt == 4);
  CHECK(kept[2].worker_pid == 7);
  CHECK(recorder.dropped() == 2);
}

// Invariant: the ring grows on demand (it is not allocated up front), also
// after a Drain left it partly grown, and still keeps the newest in order.
TEST_CASE("the task event ring grows after a drain and then wraps in order") {
  TaskEventRecorder recorder(/*capacity=*/4);
  TaskId t = TaskId::Random();
  recorder.Record(TaskEventKind::kStarted, t, 100);
  recorder.Record(TaskEventKind::kStarted, t, 101);
  REQUIRE(recorder.Drain().size() == 2);
  for (uint32_t attempt = 0; attempt < 6; ++attempt) recorder.Record(TaskEventKind::kStarted, t, attempt);
  auto kept = recorder.Drain();
  REQUIRE(kept.size() == 4);
  for (uint32_t i = 0; i < 4; ++i) CHECK(kept[i].attempt == i + 2);
  CHECK(recorder.dropped() == 2);
}

TEST_CASE("a disabled task event recorder records nothing") {
  TaskEventRecorder recorder(8, /*enabled=*/false);
  recorder.Record(TaskEventKind::kSubmitted, TaskId::Random(), 0, "x");
  CHECK(recorder.Drain().empty());
  recorder.SetEnabled(true);
  recorder.Record(TaskEventKind::kSubmitted, TaskId::Random(), 0, "x");
  CHECK(recorder.Drain().size() == 1);
}

TEST_CASE("task events survive the wire unchanged") {
  TaskEvent pull{.kind = TaskEventKind::kPull, .pid = 42, .time_us = 1000, .name = "obj",
                 .node = NodeId::Random(), .bytes = 1 << 20, .duration_us = 250};
  TaskEvent lease{.kind = TaskEventKind::kLeaseGranted, .actor_call = true, .attempt = 3,
                  .pid = 43, .time_us = 2000, .task_id = TaskId::Random(),
                  .worker = WorkerId::Random(), .worker_pid = 99};
  OutMessage out;
  auto batch = out.Init().initTaskEvents();
  TaskEventsToProto({pull, lease}, batch);
  auto back = TaskEventsFromProto(batch.asReader());
  REQUIRE(back.size() == 2);
  CHECK(back[0].kind == TaskEventKind::kPull);
  CHECK(back[0].name == "obj");
  CHECK(back[0].node == pull.node);
  CHECK(back[0].bytes == pull.bytes);
  CHECK(back[0].duration_us == 250);
  CHECK(back[0].task_id.IsNil());
  CHECK(back[1].actor_call);
  CHECK(back[1].attempt == 3);
  CHECK(back[1].task_id == lease.task_id);
  CHECK(back[1].worker == lease.worker);
  CHECK(back[1].worker_pid == 99);
  CHECK(back[1].pid == 43);
  CHECK(back[1].time_us == 2000);
}

}  // namespace
}  // namespace lumen
