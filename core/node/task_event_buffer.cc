#include "core/node/task_event_buffer.h"

#include <algorithm>
#include <utility>

namespace lumen::node {

void FillTaskTotals(const TaskEventTotals& totals, proto::TaskTotals::Builder out) {
  auto kinds = out.initEventsByKind(totals.by_kind.size());
  for (size_t i = 0; i < totals.by_kind.size(); ++i) kinds.set(i, totals.by_kind[i]);
  auto buckets = out.initLatencyBuckets(totals.latency_buckets.size());
  for (size_t i = 0; i < totals.latency_buckets.size(); ++i) buckets.set(i, totals.latency_buckets[i]);
  out.setLatencySumSeconds(totals.latency_sum_seconds);
  out.setPulledBytes(totals.pulled_bytes);
  out.setDroppedEvents(totals.dropped);
}

void TaskEventBuffer::Add(std::vector<TaskEvent> events, uint64_t dropped_upstream) {
  io_thread_.Check("TaskEventBuffer::Add");
  totals_.dropped += dropped_upstream;
  if (ring_.capacity() == 0) ring_.reserve(std::min(capacity_, std::max<size_t>(events.size(), 1024)));
  for (auto& e : events) {
    Count(e);
    if (ring_.size() < capacity_) {
      ring_.push_back(std::move(e));
    } else {
      ring_[head_] = std::move(e);
      head_ = (head_ + 1) % ring_.size();
      ++totals_.dropped;
    }
  }
}

std::vector<TaskEvent> TaskEventBuffer::events() const {
  io_thread_.Check("TaskEventBuffer::events");
  std::vector<TaskEvent> out;
  out.reserve(ring_.size());
  for (size_t i = 0; i < ring_.size(); ++i) out.push_back(ring_[(head_ + i) % ring_.size()]);
  return out;
}

void TaskEventBuffer::Count(const TaskEvent& e) {
  ++totals_.by_kind[static_cast<size_t>(e.kind)];
  switch (e.kind) {
    case TaskEventKind::kSubmitted:
      // A bounded memory: under a flood of tasks that never end, start over.
      if (submitted_at_.size() >= kMaxOpenTasks) submitted_at_.clear();
      submitted_at_[e.task_id] = e.time_us;
      break;
    case TaskEventKind::kFinished:
    case TaskEventKind::kFailed: {
      auto it = submitted_at_.find(e.task_id);
      if (it == submitted_at_.end()) break;
      double seconds = static_cast<double>(e.time_us - it->second) / 1e6;
      submitted_at_.erase(it);
      if (seconds < 0) seconds = 0;
      size_t bucket = 0;
      while (bucket < kTaskLatencyBuckets.size() && seconds > kTaskLatencyBuckets[bucket]) ++bucket;
      ++totals_.latency_buckets[bucket];
      totals_.latency_sum_seconds += seconds;
      break;
    }
    case TaskEventKind::kPull:
      totals_.pulled_bytes += e.bytes;
      break;
    default:
      break;
  }
}

}  // namespace lumen::node
