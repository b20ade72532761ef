// Task events: what happened to each task and actor call, and when, recorded
// cheaply in a bounded ring per recording thread for `lumen timeline`, the
// head's metrics and debugging (doc/observability.md).
//
//   uint64_t t = TaskEvents().Record(TaskEventKind::kSubmitted, task_id, attempt, name);
//   ...
//   TaskEvents().Record(TaskEventKind::kFinished, task_id, attempt, {}, {.since_tick = t});
//   std::string records;
//   TaskEvents().DrainPacked(&records);   // the flusher, periodically (task_event_packed.h)
//
// A task's life, as the owner (the submitter) and the executor record it:
//
//   owner:    SUBMITTED -> DEPENDENCIES_READY -> LEASE_GRANTED -> FINISHED | FAILED
//   executor:                      STARTED -> ARGS_FETCHED -> EXECUTED -> RESULT_STORED
//
// The executor's four mostly travel in its reply instead (TaskExecution), and
// the owner's FINISHED/FAILED record stands for them too: a worker records a
// task itself only when it is still running at a flush of the worker's events
// (so a long task shows as running), STARTED then and RESULT_STORED at its end.
//
// One record per task in each process, mostly: the events in the middle are
// taken as ticks (Tick()) that the caller keeps with the task and passes to
// the record that ends its part (TaskEventDetail::earlier_ticks):
// FINISHED/FAILED carries DEPENDENCIES_READY's and LEASE_GRANTED's,
// RESULT_STORED carries ARGS_FETCHED's and EXECUTED's. And the record that
// starts a part (SUBMITTED, STARTED) leaves a TaskEventMark with the task;
// FINISHED or RESULT_STORED given it (TaskEventDetail::start) rewrites that
// record in place, one record for the whole part, when no drain took it in
// between and the same thread records both (else it is a record of its own).
// Readers see them as events of their own (task_event_packed.h expands them),
// and a task pending or running at a drain still shows as SUBMITTED or
// STARTED there, before it ends.
//
// The phases follow from consecutive times: dependency wait (SUBMITTED ->
// DEPENDENCIES_READY), lease wait (-> LEASE_GRANTED), argument fetch (STARTED ->
// ARGS_FETCHED), execution (-> EXECUTED), result store (-> RESULT_STORED). An
// actor call has no lease: its LEASE_GRANTED is when it was sent to the actor.
// FINISHED and FAILED carry the task's latency (submission to end, as the
// owner saw it) when the owner passes SUBMITTED's tick. The node daemon also
// records the leases it grants (LEASE_GRANTED with no task) and the objects it
// pulls (PULL, with bytes and duration).
//
// Times are the system clock in microseconds since the epoch, so the events of
// the processes of one machine line up (across machines, as well as their
// clocks agree). They are taken as TaskEventClock ticks (one `rdtsc` where the
// TSC is invariant) and converted when drained.
//
// Thread-safe. Each recording thread has its own ring (created at its first
// event), so recording takes no lock that another recording thread could hold:
// a Record is one clock read and a copy into a preallocated fixed-size slot
// (no allocation for names of up to kInlineName bytes, nor for a longer one
// the thread gave last since the drain), under a per-thread spin flag that
// only a drain also takes, for an O(1) swap. When a thread's ring is full its
// oldest event is dropped and counted. A drain merges the threads' rings by
// time. Disabled (LUMEN_TASK_EVENTS=0) a Record is one
// relaxed atomic load.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "lumen/common/ids.h"
#include "lumen/common/task_event_clock.h"

namespace lumen {

// The order is the wire order (TaskEventRecord.kind); append only.
enum class TaskEventKind : uint8_t {
  kSubmitted = 0,
  kDependenciesReady = 1,
  kLeaseGranted = 2,
  kStarted = 3,
  kArgsFetched = 4,
  kExecuted = 5,
  kResultStored = 6,
  kFinished = 7,
  kFailed = 8,
  kPull = 9,
  kSpill = 10,    // the node's store wrote objects to disk (one event per spill file)
  kRestore = 11,  // the node's store read a spilled object back (one event per object)
};
inline constexpr int kNumTaskEventKinds = 12;

// Upper bounds (seconds) of the task latency histogram's buckets (nodes count
// into them, the head's /metrics shows them); +Inf follows.
inline constexpr std::array<double, 10> kTaskLatencyBuckets = {
    0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 60};

// "SUBMITTED", "LEASE_GRANTED", ... (a literal).
const char* TaskEventKindName(TaskEventKind kind);

// One event. Which fields are set depends on the kind (the rest stay zero).
struct TaskEvent {
  TaskEventKind kind = TaskEventKind::kSubmitted;
  bool actor_call = false;  // an actor method call (or creation), not a normal task
  uint32_t attempt = 0;
  int32_t pid = 0;          // the recording process (set by Record)
  int64_t time_us = 0;      // system clock, microseconds since the epoch
  TaskId task_id;           // nil for PULL, SPILL, RESTORE and the node's own LEASE_GRANTED
  // SUBMITTED: the task's name; STARTED: the function; PULL, RESTORE: the
  // object's hex id; SPILL: "N objects"; FAILED: the error message (truncated
  // to 200 characters).
  std::string name;
  NodeId node;              // LEASE_GRANTED: the granting node; PULL: the source node
  WorkerId worker;          // LEASE_GRANTED, STARTED: the worker that runs it
  int32_t worker_pid = 0;   // LEASE_GRANTED: the worker's pid
  uint64_t bytes = 0;       // PULL, SPILL, RESTORE: the bytes copied
  // PULL, SPILL, RESTORE: how long the copy took; FINISHED/FAILED: the task's
  // latency, submission to end as the owner saw it (0: not known).
  int64_t duration_us = 0;
};

// The kinds whose ticks an event of `kind` carries in earlier_ticks (in that
// order): DEPENDENCIES_READY and LEASE_GRANTED for FINISHED/FAILED,
// ARGS_FETCHED and EXECUTED for RESULT_STORED; false for the other kinds.
bool FoldedKinds(TaskEventKind kind, std::array<TaskEventKind, 2>* kinds);

// Where a SUBMITTED or STARTED record went (TaskEventDetail::start), for
// the record that ends the task's part to rewrite it in place. Opaque.
struct TaskEventMark {
  uint64_t generation = 0;  // the ring's, at the Record (0: none)
  uint64_t index = 0;       // the slot
};

// What an executor measured of a task it ran, sent back in its reply: the
// worker's STARTED, ARGS_FETCHED, EXECUTED and RESULT_STORED, which the
// owner's FINISHED/FAILED record then stands for (TaskEventDetail::execution).
struct TaskExecution {
  int64_t started_us = 0;      // system clock, microseconds since the epoch (0: none)
  uint32_t args_fetch_us = 0;  // STARTED -> ARGS_FETCHED
  uint32_t run_us = 0;         // -> EXECUTED
  uint32_t store_us = 0;       // -> RESULT_STORED
};

// Extra fields for Record: what a few kinds carry besides the task.
struct TaskEventDetail {
  // LEASE_GRANTED (also the folded one of FINISHED/FAILED): the node and the
  // worker's pid; PULL: the source node.
  NodeId node;
  WorkerId worker;
  // STARTED: the node and worker are this process's (SetProcessIds), written
  // once per flush rather than per event; `node` and `worker` are ignored.
  bool self_ids = false;
  int32_t worker_pid = 0;
  uint64_t bytes = 0;
  int64_t duration_us = 0;
  bool actor_call = false;
  // FINISHED/FAILED: the tick Record returned for the attempt's SUBMITTED
  // (0: none); the event then carries the latency in duration_us.
  uint64_t since_tick = 0;
  // FINISHED/FAILED, RESULT_STORED: the ticks (Tick()) of the events folded
  // into this one (FoldedKinds), 0 for one that did not happen.
  std::array<uint64_t, 2> earlier_ticks{};
  // SUBMITTED, STARTED: the event's tick when it was taken earlier (Tick();
  // 0: now).
  uint64_t at_tick = 0;
  // FINISHED/FAILED: the executor's events, when its reply carried them (the
  // worker then recorded none): they run in the process `worker_pid` on
  // `node`.
  TaskExecution execution;
  // SUBMITTED, STARTED: set to where the record went. FINISHED, RESULT_STORED:
  // the mark its start left; the start's record becomes this one (carrying
  // both) if it is still in this thread's ring, undrained. Other kinds: unused.
  TaskEventMark* start = nullptr;
};

class TaskEventRecorder {
 public:
  static constexpr size_t kDefaultCapacity = 1 << 16;
  // Name bytes a slot holds without an allocation (function names; longer
  // ones, such as error messages, go to a side list).
  static constexpr size_t kInlineName = 32;

  // `capacity`: events each recording thread keeps until the next Drain, and
  // the most a Drain returns (the newest of all threads; older ones are
  // dropped and counted). A ring grows on demand up to it: allocating (and so
  // touching) all of it up front cost every new worker process ~8 MiB of page
  // faults, ~5 ms of each actor creation.
  explicit TaskEventRecorder(size_t capacity = kDefaultCapacity, bool enabled = true);
  ~TaskEventRecorder();
  TaskEventRecorder(const TaskEventRecorder&) = delete;
  TaskEventRecorder& operator=(const TaskEventRecorder&) = delete;

  bool enabled() const { return enabled_.load(std::memory_order_relaxed); }
  // The node and worker this process is (a worker's, set once at its start):
  // what events recorded with TaskEventDetail::self_ids carry.
  void SetProcessIds(const NodeId& node, const WorkerId& worker);
  void SetEnabled(bool enabled) { enabled_.store(enabled, std::memory_order_relaxed); }

  // Records `kind` for attempt `attempt` of `task` now; `name` is copied.
  // Returns the event's tick (TaskEventClock), 0 when disabled: a later
  // FINISHED/FAILED passes it as `since_tick`.
  uint64_t Record(TaskEventKind kind, const TaskId& task, uint32_t attempt,
                  std::string_view name = {}, const TaskEventDetail& detail = {});
  // Records an event built by the caller (its time and pid are kept if set).
  void RecordEvent(const TaskEvent& event);
  // The clock now (TaskEventClock ticks), 0 when disabled: the time of an
  // event folded into a later Record (TaskEventDetail::earlier_ticks).
  uint64_t Tick() const { return enabled() ? TaskEventClock::Now() : 0; }

  // Takes the events recorded since the last drain (the newest `capacity`
  // of them), by time (one thread's in the order it recorded them), and
  // appends them to `records` in the packed form (task_event_packed.h, no
  // version byte). Returns how many.
  size_t DrainPacked(std::string* records);
  // The same, decoded (tests, and where a vector is handier than speed).
  std::vector<TaskEvent> Drain();
  // Events dropped because a ring was full, since the start.
  uint64_t dropped() const;

  // Calls `signal` when a recording thread's ring reaches `records` events
  // since the last drain (once per ring per drain), on that thread, after the
  // Record, under a lock of its own (never the rings'): a flusher's cue to
  // drain before the ring grows on or fills whatever its period. Replaces an
  // earlier signal; `signal` must return quickly (post work elsewhere).
  void SetFillSignal(size_t records, std::function<void()> signal);
  // No signal from now on: one being called has returned.
  void ClearFillSignal();

  // Microseconds since the epoch on the system clock (the events' time base).
  static int64_t NowMicros();

 private:
  struct Slot;        // one event in a ring (task_events.cc)
  struct ThreadRing;  // one recording thread's ring (task_events.cc)

  // This thread's ring, created at its first event.
  ThreadRing& RingOfThisThread();
  // Calls the fill signal, if one is set.
  void SignalFill();

  std::atomic<bool> enabled_;
  const int32_t pid_;
  const size_t capacity_;  // most events kept per thread
  const uint64_t id_;      // unique per recorder: the key of the threads' cached ring
  mutable absl::Mutex mu_;  // registration and drains; never taken by a Record that has its ring
  std::vector<std::shared_ptr<ThreadRing>> rings_ ABSL_GUARDED_BY(mu_);
  TaskEventClock clock_ ABSL_GUARDED_BY(mu_);  // Anchor() at each drain
  NodeId self_node_ ABSL_GUARDED_BY(mu_);      // SetProcessIds
  WorkerId self_worker_ ABSL_GUARDED_BY(mu_);
  uint64_t retired_dropped_ ABSL_GUARDED_BY(mu_) = 0;  // of rings whose thread ended
  uint64_t drained_dropped_ ABSL_GUARDED_BY(mu_) = 0;  // the oldest beyond capacity_ at a Drain
  uint64_t generations_ ABSL_GUARDED_BY(mu_) = 0;      // the last ThreadRing::generation given
  // SetFillSignal's: the ring size that calls it (0: none; read by every
  // Record without a lock), and the signal.
  std::atomic<size_t> fill_signal_at_{0};
  absl::Mutex fill_signal_mu_;
  std::function<void()> fill_signal_ ABSL_GUARDED_BY(fill_signal_mu_);
};

// This process's recorder (kDefaultCapacity events): enabled unless
// LUMEN_TASK_EVENTS=0 (read once, at the first call). One per process so that
// every part of the runtime records with a one-line call, whichever class it is
// in, without a reference threaded through every constructor.
TaskEventRecorder& TaskEvents();

}  // namespace lumen
