// TaskEventBuffer: the node daemon's bounded event store and its totals.
#include "core/node/task_event_buffer.h"

#include <catch2/catch.hpp>

namespace lumen::node {
namespace {

TaskEvent At(TaskEventKind kind, const TaskId& task, int64_t time_us) {
  return TaskEvent{.kind = kind, .time_us = time_us, .task_id = task};
}

// Invariant: the buffer keeps the newest `capacity` events in arrival order and
// counts every event it lost (here or upstream); its totals count all events
// ever added, whether still kept or not.
TEST_CASE("the node's task event buffer is bounded and counts what it dropped") {
  TaskEventBuffer buffer(/*capacity=*/4);
  TaskId t = TaskId::Random();
  std::vector<TaskEvent> batch;
  for (int i = 0; i < 6; ++i) batch.push_back(At(TaskEventKind::kStarted, t, i));
  buffer.Add(batch, /*dropped_upstream=*/5);
  REQUIRE(buffer.events().size() == 4);
  CHECK(buffer.events().front().time_us == 2);
  CHECK(buffer.events().back().time_us == 5);
  CHECK(buffer.totals().dropped == 7);
  CHECK(buffer.totals().by_kind[static_cast<int>(TaskEventKind::kStarted)] == 6);
}

// Invariant: each task that ends adds its submission-to-end time to exactly
// one latency bucket (the first bound it does not exceed), and its seconds to
// the sum; pulls add their bytes.
TEST_CASE("the node's task event totals give latency buckets and pulled bytes") {
  TaskEventBuffer buffer;
  TaskId fast = TaskId::Random(), slow = TaskId::Random(), unknown = TaskId::Random();
  buffer.Add({At(TaskEventKind::kSubmitted, fast, 1'000'000),
              At(TaskEventKind::kSubmitted, slow, 1'000'000)},
             0);
  buffer.Add({At(TaskEventKind::kFinished, fast, 1'000'800),      // 0.8 ms
              At(TaskEventKind::kFailed, slow, 3'000'000),        // 2 s
              At(TaskEventKind::kFinished, unknown, 3'000'000)},  // never seen submitted
             0);
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

}  // namespace
}  // namespace lumen::node
