#include "lumen/common/task_events.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <utility>

#include "lumen/common/task_event_packed.h"

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
    case TaskEventKind::kSpill: return "SPILL";
    case TaskEventKind::kRestore: return "RESTORE";
  }
  return "UNKNOWN";
}

// FoldedKinds is defined in task_event_packed.cc, next to the walks that inline it.

// One event as a ring keeps it: fixed size (two cache lines), so recording is
// a copy into a slot that was allocated at an earlier event or drain. Not
// initialised when allocated (every Record writes every field it reads).
struct TaskEventRecorder::Slot {
  enum Flags : uint8_t {
    kActorCall = 1 << 0,
    kTimeIsMicros = 1 << 1,  // `tick` is system-clock microseconds (RecordEvent with a time)
    kSinceTick = 1 << 2,     // `since` is SUBMITTED's tick (else: duration_us)
    kLongName = 1 << 3,      // the name is long_names[name_len]
    kSelfIds = 1 << 4,       // node and worker: the process's (TaskEventDetail::self_ids)
    // FINISHED or RESULT_STORED written over its start's slot (SUBMITTED,
    // STARTED: TaskEventDetail::start): `since` is the start's tick, the name
    // the start's; kSinceTick is set too.
    kWithStart = 1 << 5,
    // FINISHED/FAILED with the executor's events (TaskEventDetail::execution):
    // `worker` holds ExecutionWords (a FINISHED's worker is otherwise unused)
    // and `pid` the store time; the pid is the recorder's.
    kExecution = 1 << 6,
  };
  // Leaves the plain fields as they were: a ring that grows, or a drained one
  // reused, is not zeroed slot by slot (that was a third of a Record).
  Slot() {}
  uint64_t tick;
  uint64_t since;
  TaskId task;
  NodeId node;
  WorkerId worker;
  // PULL: aux[0] is the bytes; FINISHED/FAILED, RESULT_STORED: the ticks of
  // the events folded into this one (TaskEventDetail::earlier_ticks).
  uint64_t aux[2];
  uint32_t attempt;
  int32_t pid;
  int32_t worker_pid;
  uint8_t kind;
  uint8_t flags;
  uint16_t name_len;
  char name[kInlineName];

  // kExecution: TaskExecution in the worker and pid fields (16 + 4 bytes).
  struct ExecutionWords {
    int64_t started_us;
    uint32_t args_fetch_us;
    uint32_t run_us;
  };
  static_assert(sizeof(ExecutionWords) == WorkerId::kSize);
  void SetExecution(const TaskExecution& x) {
    const ExecutionWords w{x.started_us, x.args_fetch_us, x.run_us};
    std::memcpy(static_cast<void*>(&worker), &w, sizeof(w));
    pid = static_cast<int32_t>(x.store_us);
    flags |= kExecution;
  }
  TaskExecution Execution() const {
    ExecutionWords w;
    std::memcpy(&w, static_cast<const void*>(&worker), sizeof(w));
    return {w.started_us, w.args_fetch_us, w.run_us, static_cast<uint32_t>(pid)};
  }
};

namespace {

// a == b, as two 8-byte loads (TaskId's == calls memcmp).
bool SameId(const TaskId& a, const TaskId& b) {
  static_assert(TaskId::kSize == 16);
  uint64_t x[2], y[2];
  std::memcpy(x, a.data(), 16);
  std::memcpy(y, b.data(), 16);
  return ((x[0] ^ y[0]) | (x[1] ^ y[1])) == 0;
}

}  // namespace

// One recording thread's ring. `locked` guards every other member: the owner
// thread takes it for each event, a drain for an O(1) swap, so it is contended
// only when a drain meets a Record of that thread.
struct TaskEventRecorder::ThreadRing {
  // What a drain swaps out: the slots, and the names too long for a slot.
  struct Events {
    std::vector<Slot> slots;
    std::vector<std::string> long_names;
  };

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

  // The slot for a new event, and its index: the next free one, or the
  // oldest (counted as dropped) when the ring is full. head moves only once
  // the ring is at capacity, so below it the events are slots[0, size);
  // `slots` keeps the slots of earlier drains (size() may exceed `size`) and
  // grows at its end up to `capacity`.
  Slot& NextSlot(size_t* index) {
    std::vector<Slot>& ring = events.slots;
    if (size < ring.size()) {
      *index = head == 0 ? size : (head + size) % ring.size();  // head is 0 unless full
      ++size;
      return ring[*index];
    }
    if (ring.size() < capacity) {
      *index = size++;
      return ring.emplace_back();
    }
    *index = head;
    Slot& oldest = ring[head];
    head = (head + 1) % ring.size();
    dropped.store(dropped.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    return oldest;
  }

  // The slot of `start`'s SUBMITTED or STARTED (`start_kind`) for `task`'s
  // `attempt`, if it is still this ring's (no drain since, not overwritten
  // by a full ring) and not ended yet; null otherwise.
  Slot* StartSlot(const TaskEventMark& start, TaskEventKind start_kind, const TaskId& task,
                  uint32_t attempt) {
    if (start.generation != generation || start.index >= events.slots.size()) return nullptr;
    Slot& s = events.slots[start.index];
    if (s.kind != static_cast<uint8_t>(start_kind) || s.attempt != attempt ||
        (s.flags & (Slot::kTimeIsMicros | Slot::kWithStart)) != 0 || !SameId(s.task, task)) {
      return nullptr;
    }
    return &s;
  }

  void SetName(Slot& slot, std::string_view name) {
    if (name.size() <= kInlineName) {
      slot.flags &= static_cast<uint8_t>(~Slot::kLongName);
      slot.name_len = static_cast<uint16_t>(name.size());
      // An empty view may hold a null pointer, which memcpy must not get.
      if (!name.empty()) std::memcpy(slot.name, name.data(), name.size());
      return;
    }
    // A thread records one long name again and again (an actor's method, a
    // function in a namespace): the slots share the last one rather than each
    // copying it (an allocation and a free per event).
    if (!events.long_names.empty() && events.long_names.back() == name) {
      slot.flags |= Slot::kLongName;
      slot.name_len = static_cast<uint16_t>(events.long_names.size() - 1);
      return;
    }
    // Bounded: past `capacity` distinct long names since the last drain (a
    // ring that wraps with no drain), a name is cut to the slot.
    if (events.long_names.size() >= capacity || events.long_names.size() >= 0xFFFF) {
      SetName(slot, name.substr(0, kInlineName));
      return;
    }
    slot.flags |= Slot::kLongName;
    slot.name_len = static_cast<uint16_t>(events.long_names.size());
    events.long_names.emplace_back(name);
  }

  // Whether this ring reached `at` (> 0) events since its last drain just now
  // (true once per drain): the recorder's fill signal is then due.
  bool TakeFillSignal(size_t at) {
    if (at == 0 || size < at || fill_signalled) return false;
    fill_signalled = true;
    return true;
  }

  const size_t capacity;
  const std::thread::id owner;
  std::atomic<bool> locked{false};
  Events events;
  size_t head = 0;  // index of the oldest event
  size_t size = 0;
  bool fill_signalled = false;  // TakeFillSignal said so since the last drain
  // Unique per recorder and per content of `events`: changes at each drain's
  // swap, so that a TaskEventMark of an earlier one matches no slot.
  uint64_t generation = 0;
  std::atomic<uint64_t> dropped{0};  // written under `locked`; read by dropped() without it
  // Drained events (their slots kept, to be overwritten) that replace
  // `events` at the next drain, so that a busy thread does not regrow its
  // ring every period.
  Events spare;
};

namespace {

std::atomic<uint64_t> next_recorder_id{1};
// This thread's cached ring (RingOfThisThread) was destroyed: the thread is
// ending. Trivially destructible, so it outlives the cache.
thread_local bool cache_destroyed = false;
// The ring RingOfThisThread cached, and its recorder's id: what a Record
// reads. Trivially destructible and constant-initialised, so reading it is
// one %fs-relative load, without the guard call a thread_local with a
// destructor costs at every access (~3 ns a Record). The shared_ptr that
// keeps the ring alive is RingOfThisThread's, which clears this as it goes.
struct FastRing {
  uint64_t recorder = 0;
  void* ring = nullptr;
};
thread_local FastRing fast_ring;

}  // namespace

TaskEventRecorder::TaskEventRecorder(size_t capacity, bool enabled)
    : enabled_(enabled),
      pid_(static_cast<int32_t>(::getpid())),
      capacity_(capacity == 0 ? 1 : capacity),
      id_(next_recorder_id.fetch_add(1, std::memory_order_relaxed)) {}

TaskEventRecorder::~TaskEventRecorder() = default;

void TaskEventRecorder::SetProcessIds(const NodeId& node, const WorkerId& worker) {
  absl::MutexLock lock(&mu_);
  self_node_ = node;
  self_worker_ = worker;
}

int64_t TaskEventRecorder::NowMicros() {
  return static_cast<int64_t>(TaskEventClock::SystemMicros());
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
      fast_ring = FastRing{};
      cache_destroyed = true;
    }
  };
  if (fast_ring.recorder == id_) return *static_cast<ThreadRing*>(fast_ring.ring);
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
    ring->generation = ++generations_;
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
  fast_ring = FastRing{.recorder = id_, .ring = cached.ring.get()};
  return *cached.ring;
}

uint64_t TaskEventRecorder::Record(TaskEventKind kind, const TaskId& task, uint32_t attempt,
                                   std::string_view name, const TaskEventDetail& detail) {
  static_assert(sizeof(Slot) <= 128, "a slot is two cache lines at most");
  if (!enabled()) return 0;
  const uint64_t now = detail.at_tick != 0 ? detail.at_tick : TaskEventClock::Now();
  ThreadRing& ring = fast_ring.recorder == id_ ? *static_cast<ThreadRing*>(fast_ring.ring)
                                               : RingOfThisThread();
  ring.Lock();
  if (detail.start != nullptr &&
      (kind == TaskEventKind::kFinished || kind == TaskEventKind::kResultStored)) {
    // The end of the part whose start this thread recorded: over the start's
    // slot when it is still there, one record for both.
    Slot* s = ring.StartSlot(*detail.start,
                             kind == TaskEventKind::kFinished ? TaskEventKind::kSubmitted
                                                              : TaskEventKind::kStarted,
                             task, attempt);
    if (s != nullptr) {
      // The actor flag is the start's too (the start's event is read from it).
      s->flags = static_cast<uint8_t>((s->flags & (Slot::kLongName | Slot::kSelfIds | Slot::kActorCall)) |
                                      (detail.actor_call ? Slot::kActorCall : 0) |
                                      Slot::kWithStart | Slot::kSinceTick);
      s->since = s->tick;
      s->tick = now;
      s->node = detail.node;
      s->worker = detail.worker;
      s->aux[0] = detail.earlier_ticks[0];
      s->aux[1] = detail.earlier_ticks[1];
      s->worker_pid = detail.worker_pid;
      s->kind = static_cast<uint8_t>(kind);
      if (detail.execution.started_us != 0) s->SetExecution(detail.execution);
      ring.Unlock();
      *detail.start = {};
      return now;
    }
  }
  size_t index;
  Slot& e = ring.NextSlot(&index);
  if (detail.start != nullptr) {
    *detail.start = kind == TaskEventKind::kSubmitted || kind == TaskEventKind::kStarted
                        ? TaskEventMark{.generation = ring.generation, .index = index}
                        : TaskEventMark{};
  }
  e.tick = now;
  e.flags = static_cast<uint8_t>((detail.actor_call ? Slot::kActorCall : 0) |
                                 (detail.since_tick != 0 ? Slot::kSinceTick : 0) |
                                 (detail.self_ids ? Slot::kSelfIds : 0));
  e.since = detail.since_tick != 0 ? detail.since_tick : static_cast<uint64_t>(detail.duration_us);
  e.task = task;
  e.node = detail.node;
  e.worker = detail.worker;
  if (detail.bytes != 0) {
    e.aux[0] = detail.bytes;
    e.aux[1] = 0;
  } else {
    e.aux[0] = detail.earlier_ticks[0];
    e.aux[1] = detail.earlier_ticks[1];
  }
  e.attempt = attempt;
  e.pid = pid_;
  e.worker_pid = detail.worker_pid;
  e.kind = static_cast<uint8_t>(kind);
  if (detail.execution.started_us != 0) e.SetExecution(detail.execution);
  ring.SetName(e, name);
  const bool filled = ring.TakeFillSignal(fill_signal_at_.load(std::memory_order_relaxed));
  ring.Unlock();
  if (filled) SignalFill();
  return now;
}

void TaskEventRecorder::RecordEvent(const TaskEvent& event) {
  if (!enabled()) return;
  const uint64_t now = event.time_us == 0 ? TaskEventClock::Now() : 0;
  ThreadRing& ring = fast_ring.recorder == id_ ? *static_cast<ThreadRing*>(fast_ring.ring)
                                               : RingOfThisThread();
  ring.Lock();
  size_t index;
  Slot& e = ring.NextSlot(&index);
  e.tick = event.time_us == 0 ? now : static_cast<uint64_t>(event.time_us);
  e.flags = static_cast<uint8_t>((event.actor_call ? Slot::kActorCall : 0) |
                                 (event.time_us != 0 ? Slot::kTimeIsMicros : 0));
  e.since = static_cast<uint64_t>(event.duration_us);
  e.task = event.task_id;
  e.node = event.node;
  e.worker = event.worker;
  e.aux[0] = event.bytes;
  e.aux[1] = 0;
  e.attempt = event.attempt;
  e.pid = event.pid == 0 ? pid_ : event.pid;
  e.worker_pid = event.worker_pid;
  e.kind = static_cast<uint8_t>(event.kind);
  ring.SetName(e, event.name);
  const bool filled = ring.TakeFillSignal(fill_signal_at_.load(std::memory_order_relaxed));
  ring.Unlock();
  if (filled) SignalFill();
}

void TaskEventRecorder::SetFillSignal(size_t records, std::function<void()> signal) {
  absl::MutexLock lock(&fill_signal_mu_);
  fill_signal_ = std::move(signal);
  fill_signal_at_.store(fill_signal_ ? std::max<size_t>(records, 1) : 0, std::memory_order_relaxed);
}

void TaskEventRecorder::ClearFillSignal() { SetFillSignal(0, nullptr); }

void TaskEventRecorder::SignalFill() {
  absl::MutexLock lock(&fill_signal_mu_);
  if (fill_signal_) fill_signal_();
}

size_t TaskEventRecorder::DrainPacked(std::string* records) {
  // Each ring with events, swapped out whole (its thread records on into its spare).
  struct Taken {
    ThreadRing* from;
    ThreadRing::Events events;
    size_t head = 0;
    size_t size = 0;
    size_t next = 0;             // merged so far
    // Of each event in ring order, microseconds: the order they are merged
    // in (a record written over its start's slot keeps the start's place).
    std::vector<int64_t> times;
    // No division: head is 0 unless the ring wrapped, and i < size <= slots.size().
    const Slot& at(size_t i) const {
      const size_t j = head + i;
      return events.slots[j < events.slots.size() ? j : j - events.slots.size()];
    }
  };
  absl::MutexLock lock(&mu_);
  std::vector<Taken> taken;
  size_t total = 0;
  for (const auto& r : rings_) {
    Taken t{.from = r.get()};
    r->Lock();
    if (r->size > 0) {
      std::swap(t.events, r->events);
      std::swap(r->events, r->spare);
      t.head = std::exchange(r->head, 0);
      t.size = std::exchange(r->size, 0);
      r->fill_signalled = false;
      r->generation = ++generations_;
    }
    r->Unlock();
    if (t.size > 0) {
      total += t.size;
      taken.push_back(std::move(t));
    }
  }
  // After the swaps: every tick taken is (about) before the anchor.
  const TaskEventClock::Scale scale = clock_.Anchor();
  // The time a record is merged by: its own, or its start's for a record
  // written over its start.
  auto merge_time = [&scale](const Slot& s) {
    return (s.flags & Slot::kTimeIsMicros) ? static_cast<int64_t>(s.tick)
           : (s.flags & Slot::kWithStart) ? scale.ToMicros(s.since)
                                          : scale.ToMicros(s.tick);
  };
  // One ring (the common case: a process records on one thread) is in
  // order already: its times are converted as it is written, with no pass
  // of their own.
  const bool merge = taken.size() > 1;
  if (merge) {
    for (Taken& t : taken) {
      t.times.resize(t.size);
      for (size_t i = 0; i < t.size; ++i) t.times[i] = merge_time(t.at(i));
    }
  }
  // Merged by time: a task's events may come from several threads (submitted
  // on one, finished on the io thread), and readers (the timeline) want them
  // in order. At most `capacity_` events leave the process per drain, the
  // newest, as with one ring for all threads: what the flush, the wire and the
  // node daemon handle per period stays bounded however many threads record.
  size_t skip = total > capacity_ ? total - capacity_ : 0;
  drained_dropped_ += skip;
  records->reserve(records->size() + (total - skip) * 40);
  packed_events::Writer writer(records);
  writer.SetSelf(pid_, self_node_, self_worker_);
  size_t written = 0;
  for (;;) {
    Taken* earliest = nullptr;
    if (!merge) {
      if (!taken.empty() && taken[0].next < taken[0].size) earliest = &taken[0];
    } else {
      for (Taken& t : taken) {
        if (t.next < t.size && (earliest == nullptr || t.times[t.next] < earliest->times[earliest->next])) {
          earliest = &t;
        }
      }
    }
    if (earliest == nullptr) break;
    const size_t i = earliest->next++;
    if (skip > 0) {
      --skip;
      continue;
    }
    const Slot& s = earliest->at(i);
    const bool with_start = (s.flags & Slot::kWithStart) != 0;
    const int64_t merged_at = merge ? earliest->times[i] : merge_time(s);
    const int64_t time_us = with_start ? scale.ToMicros(s.tick) : merged_at;
    int64_t duration_us = static_cast<int64_t>(s.since);
    // From the two times as converted (not the span rounded on its own), so
    // that it equals the difference of the events' times exactly.
    if (s.flags & Slot::kSinceTick) {
      duration_us = std::max<int64_t>(1, time_us - (with_start ? merged_at : scale.ToMicros(s.since)));
    }
    const auto kind = static_cast<TaskEventKind>(s.kind);
    std::array<TaskEventKind, 2> folded_kinds;
    std::array<int64_t, 2> folded{};
    uint64_t bytes = s.aux[0];
    if (FoldedKinds(kind, &folded_kinds)) {
      bytes = 0;
      for (int k = 0; k < 2; ++k) {
        if (s.aux[k] != 0) folded[k] = (s.flags & Slot::kTimeIsMicros) ? static_cast<int64_t>(s.aux[k]) : scale.ToMicros(s.aux[k]);
      }
    }
    const bool execution = (s.flags & Slot::kExecution) != 0;
    writer.Append(packed_events::Fields{
        .kind = kind,
        .actor_call = (s.flags & Slot::kActorCall) != 0,
        .attempt = s.attempt,
        .pid = execution ? pid_ : s.pid,
        .time_us = time_us,
        .task = &s.task,
        .node = &s.node,
        .worker = execution ? nullptr : &s.worker,
        .self_ids = (s.flags & Slot::kSelfIds) != 0,
        .worker_pid = s.worker_pid,
        .bytes = bytes,
        .duration_us = duration_us,
        .folded_us = folded,
        .with_start = with_start,
        .execution = execution ? s.Execution() : TaskExecution{},
        .name = (s.flags & Slot::kLongName)
                    ? std::string_view(earliest->events.long_names[s.name_len])
                    : std::string_view(s.name, s.name_len)});
    ++written;
  }
  for (Taken& t : taken) {
    t.events.long_names.clear();  // the slots stay, to be overwritten: the ring's next spare
    t.from->Lock();
    if (t.from->spare.slots.size() < t.events.slots.size()) std::swap(t.from->spare, t.events);
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
  return written;
}

std::vector<TaskEvent> TaskEventRecorder::Drain() {
  std::string records;
  DrainPacked(&records);
  auto events = packed_events::Decode(records);
  return events.ok() ? *std::move(events) : std::vector<TaskEvent>{};  // ours: always well formed
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
