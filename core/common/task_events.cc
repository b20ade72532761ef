#include "lumen/common/task_events.h"

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <utility>

namespace lumen {

const char* TaskEventKindName(TaskEventKind kind) {
  switch (kind) {
    case TaskEventKind::kSubmitted: return "SUBMITTED";
    case TaskEventKind::kDependenciesReady: return "DEPENDENCIES_READY";
    case TaskEventKind::kLeaseGranted: return "LEASE_GRANTED";
    case TaskEventKind::kStarted: return "STARTED";
    case TaskEventKind::kArgsFetched: return "ARGS_FETCHED";
    case TaskEventKind::kExecuted: return "EXECUTED";
    case TaskEventKind::kResultStored: return "RESULT_STORED";
    case TaskEventKind::kFinished: return "FINISHED";
    case TaskEventKind::kFailed: return "FAILED";
    case TaskEventKind::kPull: return "PULL";
  }
  return "UNKNOWN";
}

TaskEventRecorder::TaskEventRecorder(size_t capacity, bool enabled)
    : enabled_(enabled),
      pid_(static_cast<int32_t>(::getpid())),
      capacity_(capacity == 0 ? 1 : capacity) {}

int64_t TaskEventRecorder::NowMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void TaskEventRecorder::Record(TaskEventKind kind, const TaskId& task, uint32_t attempt,
                               std::string_view name, const TaskEventDetail& detail) {
  if (!enabled()) return;
  int64_t now = NowMicros();
  absl::MutexLock lock(&mu_);
  TaskEvent& e = NextSlot();
  e.kind = kind;
  e.actor_call = detail.actor_call;
  e.attempt = attempt;
  e.pid = pid_;
  e.time_us = now;
  e.task_id = task;
  e.name.assign(name.data(), name.size());  // reuses the slot's buffer
  e.node = detail.node;
  e.worker = detail.worker;
  e.worker_pid = detail.worker_pid;
  e.bytes = detail.bytes;
  e.duration_us = detail.duration_us;
}

void TaskEventRecorder::RecordEvent(TaskEvent event) {
  if (!enabled()) return;
  if (event.time_us == 0) event.time_us = NowMicros();
  if (event.pid == 0) event.pid = pid_;
  absl::MutexLock lock(&mu_);
  NextSlot() = std::move(event);
}

TaskEvent& TaskEventRecorder::NextSlot() {
  // head_ moves only once the ring is at capacity, so below it the events are
  // ring_[0, size_) and a full ring grows at its end.
  if (size_ == ring_.size() && ring_.size() < capacity_) {
    ++size_;
    return ring_.emplace_back();
  }
  size_t slot = (head_ + size_) % ring_.size();
  if (size_ == ring_.size()) {
    head_ = (head_ + 1) % ring_.size();
    ++dropped_;
  } else {
    ++size_;
  }
  return ring_[slot];
}

std::vector<TaskEvent> TaskEventRecorder::Drain() {
  std::vector<TaskEvent> out;
  absl::MutexLock lock(&mu_);
  out.reserve(size_);
  for (size_t i = 0; i < size_; ++i) out.push_back(ring_[(head_ + i) % ring_.size()]);
  head_ = 0;
  size_ = 0;
  return out;
}

uint64_t TaskEventRecorder::dropped() const {
  absl::MutexLock lock(&mu_);
  return dropped_;
}

TaskEventRecorder& TaskEvents() {
  // Leaked on purpose: recorded into until the process's last thread ends.
  static TaskEventRecorder* recorder = [] {
    const char* v = std::getenv("LUMEN_TASK_EVENTS");
    bool enabled = v == nullptr || std::strcmp(v, "0") != 0;
    return new TaskEventRecorder(TaskEventRecorder::kDefaultCapacity, enabled);
  }();
  return *recorder;
}

}  // namespace lumen
