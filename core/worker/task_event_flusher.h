// TaskEventFlusher: sends this process's task events (lumen::TaskEvents()) to
// its node daemon every `period`, as one taskEvents frame, and once more at
// shutdown, so that the node can answer `lumen timeline` and feed the metrics.
// A busy process flushes sooner: as soon as one of its recording threads holds
// kTargetRecords events (the recorder's fill signal, from its first second on),
// and its period shrinks to the interval that gathers about that many (down to
// kMinPeriod), so that its rings, the flush's buffers and the node's copy stay
// small enough to stay in the CPU's caches (a second of a driver running
// 80,000 tasks/s is ~20 MiB of ring slots, every write a cache miss) and its
// rings do not fill and drop between flushes.
//
//   TaskEventFlusher flusher(io, TaskEvents(), timeouts.task_event_flush_period, node_conn);
//   flusher.Start();            // io thread
//   ...
//   flusher.FlushBeforeClose(); // io thread, before the node connection closes
//
// Only on the io thread of `io` (checked in debug builds). Borrows `io` and
// `recorder` (both outlive it); holds the node connection weakly. Internal to
// core/worker.
#pragma once

#include <atomic>
#include <boost/asio.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "lumen/common/connection.h"
#include "lumen/common/task_events.h"
#include "lumen/common/thread_checker.h"

namespace lumen::runtime {

class TaskEventFlusher {
 public:
  TaskEventFlusher(boost::asio::io_context& io, TaskEventRecorder& recorder,
                   std::chrono::milliseconds period, std::weak_ptr<Connection> node);
  ~TaskEventFlusher();
  TaskEventFlusher(const TaskEventFlusher&) = delete;
  TaskEventFlusher& operator=(const TaskEventFlusher&) = delete;

  // Arms the periodic flush and the early one of a ring holding kTargetRecords
  // (nothing to do when the recorder is disabled).
  void Start();
  // Calls `record` on the io thread before each drain of the recorder: a
  // worker records the tasks still running then (running_tasks.h).
  void SetBeforeDrain(std::function<void()> record) { before_drain_ = std::move(record); }
  // Sends what was recorded since the last flush, through the connection's queue.
  void FlushNow();
  // The node asked for our events now (getTaskEvents with `request_id`, a
  // driver is stopping): sends them, possibly none, in a frame carrying that id.
  void AnswerFlush(uint64_t request_id);
  // Last flush before the connection closes: written at once, whole (waiting up
  // to kCloseSendLimit for the node to read), when nothing else is queued on it
  // (a close would drop queued bytes); dropped otherwise. Stops the periodic
  // flush.
  void FlushBeforeClose();

  // Records per flush a busy process aims at (and one recording thread's
  // records that flush at once), and its shortest period.
  static constexpr size_t kTargetRecords = 4096;
  static constexpr std::chrono::milliseconds kMinPeriod{5};
  // How long FlushBeforeClose waits, at most, for the node to take the last
  // records (Connection::SendBeforeClose).
  static constexpr std::chrono::milliseconds kCloseSendLimit{200};

 private:
  void Arm();
  // The delay to the next periodic flush, from the last one's records.
  std::chrono::steady_clock::duration NextDelay() const;
  // Builds in `out` the message carrying what was recorded since the last
  // flush; false (nothing built) if there is nothing to send, unless
  // `request_id` is set (an answer goes even with no events). `out` refers to
  // records_ (no copy): send it before the next call.
  bool TakeMessage(OutMessage& out, uint64_t request_id = 0);

  ThreadChecker io_thread_;
  TaskEventRecorder& recorder_;
  const std::chrono::milliseconds period_;
  std::weak_ptr<Connection> node_;
  boost::asio::steady_timer timer_;
  uint64_t reported_dropped_ = 0;
  // The last periodic flush: when, how many records, and the delay before it.
  std::chrono::steady_clock::time_point last_flush_at_;
  size_t last_count_ = 0;
  std::chrono::steady_clock::duration last_interval_{};
  // The packed blob of a flush (version byte, records): reused, so that a
  // flush touches memory the last one did rather than fresh pages.
  std::string records_;
  bool stopped_ = false;
  std::function<void()> before_drain_;  // SetBeforeDrain's
  // An early flush (a ring's fill signal, any thread) is posted and not run yet.
  std::atomic<bool> early_flush_posted_{false};
};

}  // namespace lumen::runtime
