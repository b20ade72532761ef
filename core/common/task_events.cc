#include "lumen/common/task_events.h"

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>
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

// One recording thread's ring. `locked` guards every other member: the owner
// thread takes it for each event, Drain for an O(1) swap, so it is contended
// only when a Drain meets a Record of that thread.
struct TaskEventRecorder::ThreadRing {
  explicit ThreadRing(size_t capacity) : capacity(capacity), owner(std::this_thread::get_id()) {}

  void Lock() {
    int spins = 0;
    while (locked.exchange(true, std::memory_order_acquire)) {
      while (locked.load(std::memory_order_relaxed)) {
        if (++spins < 64) {
#if defined(__x86_64__) || defined(__i386__)
          __builtin_ia32_pause();
#endif
        } else {
          std::this_thread::yield();  // the holder may have been preempted
        }
      }
    }
  }
  void Unlock() { locked.store(false, std::memory_order_release); }

  // The slot for a new event: the next free one, or the oldest (counted as
  // dropped) when the ring is full. head moves only once the ring is at
  // capacity, so below it the events are ring[0, size) and a full ring grows
  // at its end (without reallocating once `ring` had that capacity before).
  TaskEvent& NextSlot() {
    if (size == ring.size() && ring.size() < capacity) {
      ++size;
      return ring.emplace_back();
    }
    size_t slot = (head + size) % ring.size();
    if (size == ring.size()) {
      head = (head + 1) % ring.size();
      dropped.store(dropped.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    } else {
      ++size;
    }
    return ring[slot];
  }

  const size_t capacity;
  const std::thread::id owner;
  std::atomic<bool> locked{false};
  std::vector<TaskEvent> ring;
  size_t head = 0;  // index of the oldest event
  size_t size = 0;
  std::atomic<uint64_t> dropped{0};  // written under `locked`; read by dropped() without it
  // A drained ring (cleared, its capacity kept) that replaces `ring` at the
  // next Drain, so that a busy thread does not regrow its ring every period.
  std::vector<TaskEvent> spare;
};

namespace {

std::atomic<uint64_t> next_recorder_id{1};
// This thread's cached ring (RingOfThisThread) was destroyed: the thread is
// ending. Trivially destructible, so it outlives the cache.
thread_local bool cache_destroyed = false;

}  // namespace

TaskEventRecorder::TaskEventRecorder(size_t capacity, bool enabled)
    : enabled_(enabled),
      pid_(static_cast<int32_t>(::getpid())),
      capacity_(capacity == 0 ? 1 : capacity),
      id_(next_recorder_id.fetch_add(1, std::memory_order_relaxed)) {}

TaskEventRecorder::~TaskEventRecorder() = default;

int64_t TaskEventRecorder::NowMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

TaskEventRecorder::ThreadRing& TaskEventRecorder::RingOfThisThread() {
  // The ring of the recorder this thread recorded into last (in a process,
  // TaskEvents(): always a hit). Holding it keeps the ring alive while the
  // thread may write to it; a ring nobody else holds belongs to an ended
  // thread (or one recording elsewhere) and Drain may retire it once empty.
  struct Cached {
    uint64_t recorder = 0;
    std::shared_ptr<ThreadRing> ring;
    ~Cached() {
      recorder = 0;  // later Records of this ending thread take the slow path
      cache_destroyed = true;
    }
  };
  static thread_local Cached cached;
  if (cached.recorder == id_) return *cached.ring;
  absl::MutexLock lock(&mu_);
  std::shared_ptr<ThreadRing> ring;
  const std::thread::id self = std::this_thread::get_id();
  for (const auto& r : rings_) {
    if (r->owner == self) ring = r;
  }
  if (!ring) {
    ring = std::make_shared<ThreadRing>(capacity_);
    rings_.push_back(ring);
  }
  if (cache_destroyed) {
    // Recording while this thread ends, after its cache went: hold the ring
    // for good (leaked) so that Drain never retires it under us.
    new std::shared_ptr<ThreadRing>(ring);
    return *ring;
  }
  cached.recorder = id_;
  cached.ring = std::move(ring);
  return *cached.ring;
}

void TaskEventRecorder::Record(TaskEventKind kind, const TaskId& task, uint32_t attempt,
                               std::string_view name, const TaskEventDetail& detail) {
  if (!enabled()) return;
  int64_t now = NowMicros();
  ThreadRing& ring = RingOfThisThread();
  ring.Lock();
  TaskEvent& e = ring.NextSlot();
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
  ring.Unlock();
}

void TaskEventRecorder::RecordEvent(TaskEvent event) {
  if (!enabled()) return;
  if (event.time_us == 0) event.time_us = NowMicros();
  if (event.pid == 0) event.pid = pid_;
  ThreadRing& ring = RingOfThisThread();
  ring.Lock();
  ring.NextSlot() = std::move(event);
  ring.Unlock();
}

std::vector<TaskEvent> TaskEventRecorder::Drain() {
  // Each ring with events, swapped out whole (its thread records on into its spare).
  struct Taken {
    ThreadRing* from;
    std::vector<TaskEvent> ring;
    size_t head = 0;
    size_t size = 0;
    size_t next = 0;  // merged so far
    TaskEvent& at(size_t i) { return ring[(head + i) % ring.size()]; }
  };
  absl::MutexLock lock(&mu_);
  std::vector<Taken> taken;
  size_t total = 0;
  for (const auto& r : rings_) {
    Taken t{.from = r.get()};
    r->Lock();
    if (r->size > 0) {
      t.ring.swap(r->ring);
      r->ring.swap(r->spare);
      t.head = std::exchange(r->head, 0);
      t.size = std::exchange(r->size, 0);
    }
    r->Unlock();
    if (t.size > 0) {
      total += t.size;
      taken.push_back(std::move(t));
    }
  }
  // Merged by time: a task's events may come from several threads (submitted
  // on one, finished on the io thread), and readers (the node's latency
  // histogram, the timeline) want them in order.
  // At most `capacity_` events leave the process per Drain, the newest, as
  // with one ring for all threads: what the flush, the wire and the node
  // daemon handle per period stays bounded however many threads record.
  size_t skip = total > capacity_ ? total - capacity_ : 0;
  drained_dropped_ += skip;
  std::vector<TaskEvent> out;
  out.reserve(total - skip);
  for (;;) {
    Taken* earliest = nullptr;
    for (Taken& t : taken) {
      if (t.next < t.size && (earliest == nullptr ||
                              t.at(t.next).time_us < earliest->at(earliest->next).time_us)) {
        earliest = &t;
      }
    }
    if (earliest == nullptr) break;
    if (skip > 0) {
      --skip;
      ++earliest->next;
      continue;
    }
    out.push_back(std::move(earliest->at(earliest->next++)));
  }
  for (Taken& t : taken) {
    t.ring.clear();  // keeps its capacity: the ring's next spare
    t.from->Lock();
    if (t.from->spare.capacity() < t.ring.capacity()) t.from->spare.swap(t.ring);
    t.from->Unlock();
  }
  // Retire the empty rings of threads that ended.
  for (size_t i = 0; i < rings_.size();) {
    ThreadRing& r = *rings_[i];
    if (rings_[i].use_count() == 1 && r.size == 0) {  // no thread can reach it but through mu_
      retired_dropped_ += r.dropped.load(std::memory_order_relaxed);
      rings_[i] = std::move(rings_.back());
      rings_.pop_back();
    } else {
      ++i;
    }
  }
  return out;
}

uint64_t TaskEventRecorder::dropped() const {
  absl::MutexLock lock(&mu_);
  uint64_t total = retired_dropped_ + drained_dropped_;
  for (const auto& r : rings_) total += r->dropped.load(std::memory_order_relaxed);
  return total;
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
