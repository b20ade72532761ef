#include "core/worker/running_tasks.h"

#include <thread>

namespace lumen::runtime {
namespace {

// The entry this thread took last, and its registry's id (one registry per
// worker process: always a hit after the first task).
struct CachedEntry {
  uint64_t registry = 0;
  RunningTasks::Entry* entry = nullptr;
};
thread_local CachedEntry cached_entry;

}  // namespace

uint64_t RunningTasks::NextId() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

void RunningTasks::Entry::Begin(const TaskId& task, uint32_t attempt, const std::string* function,
                                bool actor_call, uint64_t start_tick) {
  task_ = task;
  attempt_ = attempt;
  function_ = function;
  actor_call_ = actor_call;
  start_tick_ = start_tick;
  state_.store(kRunning, std::memory_order_release);
}

bool RunningTasks::Entry::End() {
  uint8_t state = kRunning;
  if (state_.compare_exchange_strong(state, kIdle, std::memory_order_acq_rel)) return false;
  if (state == kIdle) return false;  // no Begin: nothing to record
  // Claimed by a flush: it may still be reading this task's fields.
  while (state_.load(std::memory_order_acquire) != kRecorded) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#else
    std::this_thread::yield();
#endif
  }
  state_.store(kIdle, std::memory_order_relaxed);
  return true;
}

RunningTasks::Entry& RunningTasks::EntryOfThisThread() {
  if (cached_entry.registry == id_) return *cached_entry.entry;
  absl::MutexLock lock(&mu_);
  entries_.push_back(std::make_unique<Entry>());
  cached_entry = CachedEntry{id_, entries_.back().get()};
  return *entries_.back();
}

size_t RunningTasks::RecordStarted(TaskEventRecorder& recorder) {
  absl::MutexLock lock(&mu_);
  size_t recorded = 0;
  for (const auto& entry : entries_) {
    uint8_t expected = Entry::kRunning;
    if (!entry->state_.compare_exchange_strong(expected, Entry::kClaimed,
                                               std::memory_order_acquire)) {
      continue;
    }
    recorder.Record(
        TaskEventKind::kStarted, entry->task_, entry->attempt_, *entry->function_,
        {.self_ids = true, .actor_call = entry->actor_call_, .at_tick = entry->start_tick_});
    entry->state_.store(Entry::kRecorded, std::memory_order_release);
    ++recorded;
  }
  return recorded;
}

}  // namespace lumen::runtime
