// TaskEventBuffer: the node daemon's bounded store of the task events its
// drivers and workers flush to it (and its own: lease grants, pulls), which it
// answers `lumen timeline` from, and the running totals it reports to the head
// for the metrics (tasks by state, task latency, transfer bytes).
//
//   TaskEventBuffer buffer;
//   absl::Status s = buffer.AddBatch(msg.getTaskEvents(), &failed);  // a process's flush
//   buffer.FillBatch(reply.initTaskEvents());                       // for `lumen timeline`
//   TaskEventTotals totals = buffer.totals();
//
// The events stay packed as they came (task_event_packed.h): one blob per
// flush, walked once for the totals (packed_events::CountEvents: kinds,
// durations and bytes only, no View and no call per event) and decoded
// only when asked for (`events()`, the cli).
//
// Only on the node daemon's io thread (checked in debug builds).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "lumen/common/task_events.h"
#include "lumen/common/thread_checker.h"
#include "lumen/proto/lumen.capnp.h"

namespace lumen::node {

// Totals since the daemon started, over every event it was given.
struct TaskEventTotals {
  std::array<uint64_t, kNumTaskEventKinds> by_kind{};  // events of each TaskEventKind
  // Submission to FINISHED/FAILED, as the owner saw it: counts per bucket of
  // kTaskLatencyBuckets (not cumulative), the last one for +Inf.
  std::array<uint64_t, kTaskLatencyBuckets.size() + 1> latency_buckets{};
  double latency_sum_seconds = 0;
  uint64_t pulled_bytes = 0;   // PULL events' bytes
  uint64_t dropped = 0;        // events lost to full rings or this buffer
};

// `totals` as the node reports them to the head (NodeStats.taskTotals).
void FillTaskTotals(const TaskEventTotals& totals, proto::TaskTotals::Builder out);

class TaskEventBuffer {
 public:
  // Records kept, at least (a record is one event, or up to three where a
  // process folded the middle of a task's life into its end:
  // task_event_packed.h); whole flushes are kept or dropped.
  static constexpr size_t kDefaultCapacity = 200000;

  explicit TaskEventBuffer(size_t capacity = kDefaultCapacity) : capacity_(capacity) {}

  // Appends `records` (a process's flush, packed, in order) as they are;
  // `dropped_upstream`: events that process lost. The oldest flushes go, whole,
  // while the newer ones hold `capacity` records (counted as dropped events,
  // one per record): at least the newest `capacity` records are kept, and at
  // most one flush more. FAILED events are also appended to `failed` (when
  // not null), decoded. A malformed blob is refused whole (an error, nothing kept
  // or counted).
  [[nodiscard]] absl::Status AddPacked(std::string records, uint64_t dropped_upstream,
                         std::vector<TaskEvent>* failed = nullptr);
  // Moves this process's own recorded events (TaskEvents(): the daemon's
  // lease grants and pulls) in.
  void AddOwnEvents();
  // The same for a taskEvents frame (packed, or the old per-event list).
  [[nodiscard]] absl::Status AddBatch(proto::TaskEventBatch::Reader batch, std::vector<TaskEvent>* failed = nullptr);
  // The same for decoded events (tests).
  void Add(const std::vector<TaskEvent>& events, uint64_t dropped_upstream);

  // A copy of the events kept, oldest first (as added), decoded. O(events
  // kept): for tests, not for every report.
  std::vector<TaskEvent> events() const;
  // Sets `out`'s packed events to those kept, oldest first, and its dropped
  // count to the total.
  void FillBatch(proto::TaskEventBatch::Builder out) const;
  size_t size() const { return kept_; }
  const TaskEventTotals& totals() const { return totals_; }

 private:
  // One flush's records, as they came.
  struct Chunk {
    std::string records;
    size_t count = 0;  // records
  };

  ThreadChecker io_thread_;
  const size_t capacity_;
  std::deque<Chunk> chunks_;  // oldest first
  size_t kept_ = 0;           // records in chunks_
  TaskEventTotals totals_;
};

}  // namespace lumen::node
