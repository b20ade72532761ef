#include "core/node/task_event_buffer.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "lumen/common/logging.h"
#include "lumen/common/task_event_packed.h"
#include "lumen/common/task_event_wire.h"

namespace lumen::node {

namespace {

// The blobs walked below passed ForEachTally's checks when they came, or were
// just packed here: an error is a bug in this file, logged rather than dropped.
void LogIfBroken(const absl::Status& status, const char* what) {
  if (!status.ok()) LUMEN_LOG(ERROR) << "task events: " << what << ": " << status;
}

}  // namespace

void FillTaskTotals(const TaskEventTotals& totals, proto::TaskTotals::Builder out) {
  auto kinds = out.initEventsByKind(totals.by_kind.size());
  for (size_t i = 0; i < totals.by_kind.size(); ++i) kinds.set(i, totals.by_kind[i]);
  auto buckets = out.initLatencyBuckets(totals.latency_buckets.size());
  for (size_t i = 0; i < totals.latency_buckets.size(); ++i) buckets.set(i, totals.latency_buckets[i]);
  out.setLatencySumSeconds(totals.latency_sum_seconds);
  out.setPulledBytes(totals.pulled_bytes);
  out.setDroppedEvents(totals.dropped);
}

absl::Status TaskEventBuffer::AddPacked(std::string records, uint64_t dropped_upstream,
                                        std::vector<TaskEvent>* failed) {
  io_thread_.Check("TaskEventBuffer::AddPacked");
  // Counted into a copy first: a malformed blob changes nothing. The lean
  // walk (no View per event, no call per event): this runs for every flush
  // of every process.
  TaskEventTotals totals = totals_;
  totals.dropped += dropped_upstream;
  size_t count = 0;
  // Events counted by kind in the walk; called back only for those with a
  // duration or bytes (about one per task).
  absl::Status status = packed_events::CountEvents(
      records, &totals.by_kind,
      [&](TaskEventKind kind, int64_t duration_us, uint64_t bytes) {
        switch (kind) {
          case TaskEventKind::kFailed:
          case TaskEventKind::kFinished: {
            if (duration_us <= 0) break;  // the owner did not know its submission
            double seconds = static_cast<double>(duration_us) / 1e6;
            size_t bucket = 0;
            while (bucket < kTaskLatencyBuckets.size() && seconds > kTaskLatencyBuckets[bucket]) ++bucket;
            ++totals.latency_buckets[bucket];
            totals.latency_sum_seconds += seconds;
            break;
          }
          case TaskEventKind::kPull:
            totals.pulled_bytes += bytes;
            break;
          default:
            break;
        }
      },
      &count);
  if (!status.ok()) return status;
  const bool any_failed = totals.by_kind[static_cast<size_t>(TaskEventKind::kFailed)] !=
                          totals_.by_kind[static_cast<size_t>(TaskEventKind::kFailed)];
  if (any_failed && failed != nullptr) {
    // Rare: the failures, decoded, from a second walk (the blob is well formed).
    LogIfBroken(packed_events::ForEach(records,
                                       [&](const packed_events::View& e) {
                                         if (e.kind == TaskEventKind::kFailed) {
                                           failed->push_back(e.ToEvent());
                                         }
                                       }),
                "failures of a checked blob");
  }
  totals_ = totals;
  if (count == 0) return absl::OkStatus();
  kept_ += count;
  chunks_.push_back(Chunk{.records = std::move(records), .count = count});
  // The oldest go, whole chunks only (a chunk is read from its start:
  // task_event_packed.h's segments), while the rest still hold capacity_.
  while (chunks_.size() > 1 && kept_ - chunks_.front().count >= capacity_) {
    kept_ -= chunks_.front().count;
    totals_.dropped += chunks_.front().count;
    chunks_.pop_front();
  }
  return absl::OkStatus();
}

absl::Status TaskEventBuffer::AddBatch(proto::TaskEventBatch::Reader batch,
                                       std::vector<TaskEvent>* failed) {
  auto records = PackedEventsOf(batch);
  if (!records.ok()) return records.status();
  return AddPacked(*std::move(records), batch.getDropped(), failed);
}

void TaskEventBuffer::Add(const std::vector<TaskEvent>& events, uint64_t dropped_upstream) {
  std::string records;
  packed_events::Writer writer(&records);
  for (const TaskEvent& e : events) writer.Append(packed_events::FieldsOf(e));
  LogIfBroken(AddPacked(std::move(records), dropped_upstream), "events just packed");
}

std::vector<TaskEvent> TaskEventBuffer::events() const {
  io_thread_.Check("TaskEventBuffer::events");
  std::vector<TaskEvent> out;
  out.reserve(kept_);
  for (const Chunk& c : chunks_) {
    LogIfBroken(packed_events::ForEach(
                    c.records, [&](const packed_events::View& e) { out.push_back(e.ToEvent()); }),
                "a kept chunk");
  }
  return out;
}

void TaskEventBuffer::FillBatch(proto::TaskEventBatch::Builder out) const {
  io_thread_.Check("TaskEventBuffer::FillBatch");
  size_t bytes = 0;
  for (const Chunk& c : chunks_) bytes += c.records.size();
  auto data = out.initPacked(static_cast<unsigned>(bytes + 1));
  data[0] = packed_events::kVersion;
  size_t at = 1;
  for (const Chunk& c : chunks_) {
    std::memcpy(data.begin() + at, c.records.data(), c.records.size());
    at += c.records.size();
  }
  out.setDropped(totals_.dropped);
}

void TaskEventBuffer::AddOwnEvents() {
  std::string records;
  TaskEvents().DrainPacked(&records);
  LogIfBroken(AddPacked(std::move(records), 0), "this process's own events");
}

}  // namespace lumen::node
