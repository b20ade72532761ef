// HeldReplies: the task replies one executor thread holds back while more of
// its tasks wait, sent together in one write (issue 13: a send costs ~6 us of
// CPU on this machine, several times a short task's work). And TaskDurations:
// how long each function's tasks took on this thread, which says whether the
// next task is short enough to hold replies across it.
//
//   HeldReplies held;
//   if (!held.TryHold(conn, frame)) { /* send held.Take(&to) + frame */ }
//
// The executor holds the reply of a plain task (not an actor call) only while
// another task waits in its receive queue and the task is known to be short,
// and sends what it holds before it spins or blocks for work, before a task
// not known to be short, and before the running task waits in the runtime
// (Get, Wait, an actor call's result, a key-value or placement group request:
// CoreWorker::FlushHeldReplies), since what it waits for may need those
// results at their owner first. So a held reply waits for a few short tasks
// at most; a task known to be short that blocks outside the runtime (a
// sleep, a file, its own socket) holds up to MaxFrames() earlier replies
// until it returns, as it holds the tasks its owner pipelined behind it.
//
// Off by default (LUMEN_HOLD_REPLIES=0) until a held reply has a time bound
// (stop 29's review): the flush is per executor thread, so a known-short task
// that waits on a thread of its own (a Get from std::async), or outside the
// runtime on something its owner does only after it has the held results
// (a file, a socket), would wait forever; and a worker that dies while it
// holds replies loses finished results (their tasks run again, or fail
// without retries). The fix is a flush from the io thread a bounded time
// after the first reply of a batch is held.
// Not thread-safe: one per executor thread. Internal to core/worker.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/container/flat_hash_map.h"
#include "lumen/common/connection.h"

namespace lumen::runtime {

class HeldReplies {
 public:
  static constexpr size_t kMaxBytes = 32 << 10;
  // How many replies one write may carry at most: LUMEN_HOLD_REPLIES
  // (default 0: off, each reply is written at once; see "Off by default"
  // above). Read once.
  static int MaxFrames();

  bool empty() const { return count_ == 0; }
  int count() const { return count_; }
  // Appends `frame` (for `to`) to what is held and returns true, unless that
  // would mix connections or pass `max_frames` or kMaxBytes (then nothing
  // changes and it returns false: send what is held, then the frame).
  bool TryHold(const std::weak_ptr<Connection>& to, std::string_view frame, int max_frames);
  // Whether what is held goes to `to` (false when nothing is held).
  bool For(const std::weak_ptr<Connection>& to) const;
  // Takes the held frames, in order, and their connection; leaves it empty.
  std::string Take(std::weak_ptr<Connection>* to);

 private:
  std::weak_ptr<Connection> to_;
  std::string frames_;
  int count_ = 0;
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
