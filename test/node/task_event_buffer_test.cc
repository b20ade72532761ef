// TaskEventBuffer: the node daemon's bounded event store and its totals.
#include "core/node/task_event_buffer.h"

#include <catch2/catch.hpp>
#include <string>

#include "lumen/common/connection.h"
#include "lumen/common/task_event_packed.h"
#include "lumen/common/task_event_wire.h"

namespace lumen::node {
namespace {

TaskEvent At(TaskEventKind kind, const TaskId& task, int64_t time_us) {
  return TaskEvent{.kind = kind, .time_us = time_us, .task_id = task};
}

// Invariant: the buffer keeps the newest `capacity` events in arrival order
// (whole flushes: the oldest goes once the newer ones hold `capacity`) and
// counts every event it lost (here or upstream); its totals count all events
// ever added, whether still kept or not.
TEST_CASE("the node's task event buffer is bounded and counts what it dropped") {
  TaskEventBuffer buffer(/*capacity=*/4);
  TaskId t = TaskId::Random();
  for (int i = 0; i < 6; i += 2) {
    buffer.Add({At(TaskEventKind::kStarted, t, i), At(TaskEventKind::kStarted, t, i + 1)},
               /*dropped_upstream=*/i == 0 ? 5 : 0);
  }
  REQUIRE(buffer.events().size() == 4);
  CHECK(buffer.events().front().time_us == 2);
  CHECK(buffer.events().back().time_us == 5);
  CHECK(buffer.totals().dropped == 7);
  CHECK(buffer.totals().by_kind[static_cast<int>(TaskEventKind::kStarted)] == 6);
}

// Invariant: each task that ends with a known latency (the owner's
// submission-to-end time, carried in its FINISHED/FAILED) adds it to exactly
// one latency bucket (the first bound it does not exceed), and its seconds to
// the sum; an end without one counts in no bucket; pulls add their bytes.
TEST_CASE("the node's task event totals give latency buckets and pulled bytes") {
  TaskEventBuffer buffer;
  TaskId fast = TaskId::Random(), slow = TaskId::Random(), unknown = TaskId::Random();
  buffer.Add({At(TaskEventKind::kSubmitted, fast, 1'000'000),
              At(TaskEventKind::kSubmitted, slow, 1'000'000)},
             0);
  TaskEvent fast_end = At(TaskEventKind::kFinished, fast, 1'000'800);
  fast_end.duration_us = 800;        // 0.8 ms
  TaskEvent slow_end = At(TaskEventKind::kFailed, slow, 3'000'000);
  slow_end.duration_us = 2'000'000;  // 2 s
  buffer.Add({fast_end, slow_end, At(TaskEventKind::kFinished, unknown, 3'000'000)}, 0);
  TaskEvent pull{.kind = TaskEventKind::kPull, .bytes = 4096};
  buffer.Add({pull, pull}, 0);
  const auto& totals = buffer.totals();
  CHECK(totals.latency_buckets[0] == 1);  // <= 1 ms
  CHECK(totals.latency_buckets[7] == 1);  // <= 5 s
  uint64_t counted = 0;
  for (uint64_t c : totals.latency_buckets) counted += c;
  CHECK(counted == 2);
  CHECK(totals.latency_sum_seconds == Approx(2.0008));
  CHECK(totals.pulled_bytes == 8192);
  CHECK(totals.by_kind[static_cast<int>(TaskEventKind::kFinished)] == 2);
  CHECK(totals.by_kind[static_cast<int>(TaskEventKind::kFailed)] == 1);
}

// Invariant: a flush's blob is kept as it came and the buffer stays bounded
// across blobs: the oldest blobs go whole once the newer ones hold the
// capacity, the rest come back in order through the wire form `lumen
// timeline` reads; FAILED events are handed out for the recent failures; a
// malformed blob is refused whole and changes nothing.
TEST_CASE("the node keeps packed flushes as they came, bounded across them") {
  TaskEventBuffer buffer(/*capacity=*/4);
  TaskId t = TaskId::Random();
  auto blob = [&](int from, int n) {
    std::string records;
    packed_events::Writer writer(&records);
    std::vector<TaskEvent> events;
    events.reserve(static_cast<size_t>(n));  // the writer borrows their names
    for (int i = from; i < from + n; ++i) {
      TaskEvent& e = events.emplace_back(At(i % 2 ? TaskEventKind::kFailed : TaskEventKind::kStarted, t, i));
      e.name = "n" + std::to_string(i);
      writer.Append(packed_events::FieldsOf(e));
    }
    return records;
  };
  std::vector<TaskEvent> failed;
  REQUIRE(buffer.AddPacked(blob(0, 3), 0, &failed).ok());
  REQUIRE(buffer.AddPacked(blob(3, 4), 1, &failed).ok());  // 3..6 hold 4: 0..2 go
  CHECK(failed.size() == 3);  // 1, 3, 5
  CHECK(buffer.size() == 4);
  CHECK(buffer.totals().dropped == 4);
  std::string bad = blob(7, 2);
  bad.resize(bad.size() - 1);
  CHECK_FALSE(buffer.AddPacked(bad, 0, &failed).ok());
  CHECK(failed.size() == 3);
  CHECK(buffer.size() == 4);
  CHECK(buffer.totals().by_kind[static_cast<int>(TaskEventKind::kStarted)] == 4);

  OutMessage out;
  auto batch = out.Init().initTaskEvents();
  buffer.FillBatch(batch);
  auto back = TaskEventsFromProto(batch.asReader());
  REQUIRE(back.ok());
  REQUIRE(back->size() == 4);
  for (int i = 0; i < 4; ++i) {
    CHECK((*back)[i].time_us == i + 3);
    CHECK((*back)[i].name == "n" + std::to_string(i + 3));
  }
  CHECK(batch.asReader().getDropped() == 4);
  REQUIRE(buffer.AddPacked(blob(7, 5), 0).ok());  // replaces all four
  CHECK(buffer.events().front().time_us == 7);
  CHECK(buffer.events().size() == 5);
}

// Invariant: a record with folded events (a FINISHED carrying its task's
// DEPENDENCIES_READY and LEASE_GRANTED) counts each event by its kind and its
// latency once, is kept (and bounded) as one record, and reads back as all
// three events.
TEST_CASE("the node counts folded task events by kind and keeps one record") {
  TaskEventBuffer buffer(/*capacity=*/2);
  TaskId t = TaskId::Random();
  NodeId node = NodeId::Random();
  std::string records;
  packed_events::Append(packed_events::Fields{.kind = TaskEventKind::kFinished, .pid = 9,
                                              .time_us = 5'000, .task = &t, .node = &node,
                                              .worker_pid = 12, .duration_us = 4'000,
                                              .folded_us = {2'000, 3'000}},
                        &records);
  REQUIRE(buffer.AddPacked(records, 0).ok());
  CHECK(buffer.size() == 1);
  const TaskEventTotals& totals = buffer.totals();
  CHECK(totals.by_kind[static_cast<int>(TaskEventKind::kDependenciesReady)] == 1);
  CHECK(totals.by_kind[static_cast<int>(TaskEventKind::kLeaseGranted)] == 1);
  CHECK(totals.by_kind[static_cast<int>(TaskEventKind::kFinished)] == 1);
  uint64_t in_buckets = 0;
  for (uint64_t n : totals.latency_buckets) in_buckets += n;
  CHECK(in_buckets == 1);
  auto events = buffer.events();
  REQUIRE(events.size() == 3);
  CHECK(events[0].time_us == 2'000);
  CHECK(events[1].kind == TaskEventKind::kLeaseGranted);
  CHECK(events[1].worker_pid == 12);
  CHECK(events[1].node == node);
  CHECK(events[2].duration_us == 4'000);
  // Two more records: the oldest goes whole, all three of its events with it.
  REQUIRE(buffer.AddPacked(records + records, 0).ok());
  CHECK(buffer.size() == 2);
  CHECK(buffer.events().size() == 6);
}

}  // namespace
}  // namespace lumen::node
