// HeldReplies: the task replies one executor thread holds back while more of
// its tasks wait, sent together in one write (issue 13: a send costs ~6 us of
// CPU on this machine, several times a short task's work). And TaskDurations:
// how long each function's tasks took on this thread, which says whether the
// next task is short enough to hold replies across it.
//
//   HeldReplies held;
//   if (!held.TryHold(conn, frame)) { /* send held.frames(), then frame; held.Clear() */ }
//
// The executor holds the reply of a plain task (not an actor call) only while
// another task waits in its receive queue and the task is known to be short,
// and sends what it holds before it spins or blocks for work, before a task
// not known to be short, and before the running task waits in the runtime
// (Get, Wait, an actor call's result, a key-value or placement group request:
// CoreWorker::FlushHeldReplies), since what it waits for may need those
// results at their owner first.
//
// And a held reply waits MaxHoldMicros() at most: the first hold of a batch
// arms a timer of the host (the worker's io thread), which sends every batch
// held longer than that, whatever its executor thread does meanwhile. So a
// known-short task that waits where the executor cannot see it (a Get on a
// thread of its own, a file or socket its owner writes only once it has the
// held results) delays those results by that bound, never forever; and a
// worker that dies loses at most that much of finished results (their tasks
// run again, or fail without retries left, as if it died running them).
//
// HeldReplies itself is not thread-safe; HeldBatch guards one executor
// thread's with the mutex that the executor thread and the timer take.
// Internal to core/worker.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "lumen/common/connection.h"

namespace lumen::runtime {

class HeldReplies {
 public:
  static constexpr size_t kMaxBytes = 32 << 10;
  // How many replies one write may carry at most: LUMEN_HOLD_REPLIES
  // (default 8; 0: off, each reply is written at once). Read once.
  static int MaxFrames();
  // How long a reply may be held at most, in microseconds:
  // LUMEN_HOLD_REPLIES_MAX_US (default 500; at least 1). Read once.
  static int MaxHoldMicros();

  bool empty() const { return count_ == 0; }
  int count() const { return count_; }
  // Appends `frame` (for `to`) to what is held and returns true, unless that
  // would mix connections or pass `max_frames` or kMaxBytes (then nothing
  // changes and it returns false: send what is held, then the frame).
  bool TryHold(const std::weak_ptr<Connection>& to, std::string_view frame, int max_frames);
  // Whether what is held goes to `to` (false when nothing is held).
  bool For(const std::weak_ptr<Connection>& to) const;
  // Appends `frame` for `to` beyond the limits (For(to) or empty), for a
  // caller that sends what is held right after, in the same write.
  void Append(const std::weak_ptr<Connection>& to, std::string_view frame);
  // The held frames, in order, and their connection (valid until a change).
  std::string_view frames() const { return frames_; }
  const std::weak_ptr<Connection>& to() const { return to_; }
  // Empties it once sent. Its buffer is kept (at most kMaxBytes plus a frame):
  // grown anew for every batch, it cost a worker four allocations per batch,
  // two of them large enough to make glibc's malloc consolidate its free lists.
  void Clear();

 private:
  std::weak_ptr<Connection> to_;
  std::string frames_;
  int count_ = 0;
};

// One executor thread's held replies, shared with the host's timer.
struct HeldBatch {
  absl::Mutex mu;
  HeldReplies held ABSL_GUARDED_BY(mu);
  // When the first of what is held was held.
  std::chrono::steady_clock::time_point since ABSL_GUARDED_BY(mu);
};

class TaskDurations {
 public:
  // Tasks that took less than this on average (microseconds) are short, by
  // default (TaskExecutor::Options::short_task_micros).
  static constexpr double kShortMicros = 50;
  void Record(std::string_view function, uint64_t micros);
  // Whether `function`'s tasks ran here before and took less than
  // `short_micros` on average (an exponentially weighted mean, recent runs
  // weighing most).
  bool KnownShort(std::string_view function, double short_micros) const;

 private:
  absl::flat_hash_map<std::string, double> mean_micros_;
};

}  // namespace lumen::runtime
