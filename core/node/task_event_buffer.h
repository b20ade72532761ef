// TaskEventBuffer: the node daemon's bounded store of the task events its
// drivers and workers flush to it (and its own: lease grants, pulls), which it
// answers `lumen timeline` from, and the running totals it reports to the head
// for the metrics (tasks by state, task latency, transfer bytes).
//
//   TaskEventBuffer buffer;
//   buffer.Add(TaskEventsFromProto(msg.getTaskEvents()), batch.getDropped());
//   for (const TaskEvent& e : buffer.events()) ...;   // a copy, oldest first
//   TaskEventTotals totals = buffer.totals();
//
// Only on the node daemon's io thread (checked in debug builds).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"
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
  static constexpr size_t kDefaultCapacity = 200000;
  // Open submissions remembered for the latency histogram.
  static constexpr size_t kMaxOpenTasks = 100000;

  explicit TaskEventBuffer(size_t capacity = kDefaultCapacity) : capacity_(capacity) {}

  // Appends `events` (a process's flush, in order); `dropped_upstream`: events
  // that process lost. The oldest events go when the buffer is full.
  void Add(std::vector<TaskEvent> events, uint64_t dropped_upstream);

  // A copy of the events kept, oldest first (as added). O(events kept): for
  // `lumen timeline` and tests, not for every report.
  std::vector<TaskEvent> events() const;
  const TaskEventTotals& totals() const { return totals_; }

 private:
  void Count(const TaskEvent& event);

  ThreadChecker io_thread_;
  const size_t capacity_;
  // A ring of the newest events: ring_[head_] is the oldest once it is full;
  // until then it grows at its end. A new event is moved into the slot of the
  // one it replaces (no allocation per event once the ring is full).
  std::vector<TaskEvent> ring_;
  size_t head_ = 0;
  TaskEventTotals totals_;
  // SUBMITTED time of each task not finished yet (by this node's owners).
  absl::flat_hash_map<TaskId, int64_t> submitted_at_;
};

}  // namespace lumen::node
