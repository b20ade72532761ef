// TaskEventFlusher: sends this process's task events (lumen::TaskEvents()) to
// its node daemon every `period`, as one taskEvents frame, and once more at
// shutdown, so that the node can answer `lumen timeline` and feed the metrics.
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

#include <chrono>
#include <memory>
#include <string>

#include <boost/asio.hpp>

#include "lumen/common/connection.h"
#include "lumen/common/task_events.h"
#include "lumen/common/thread_checker.h"

namespace lumen::runtime {

class TaskEventFlusher {
 public:
  TaskEventFlusher(boost::asio::io_context& io, TaskEventRecorder& recorder,
                   std::chrono::milliseconds period, std::weak_ptr<Connection> node);
  TaskEventFlusher(const TaskEventFlusher&) = delete;
  TaskEventFlusher& operator=(const TaskEventFlusher&) = delete;

  // Arms the periodic flush (nothing to do when the recorder is disabled).
  void Start();
  // Sends what was recorded since the last flush, through the connection's queue.
  void FlushNow();
  // The node asked for our events now (getTaskEvents with `request_id`, a
  // driver is stopping): sends them, possibly none, in a frame carrying that id.
  void AnswerFlush(uint64_t request_id);
  // Last flush before the connection closes: written at once when nothing else
  // is queued on it (a close would drop queued bytes); dropped otherwise. Stops
  // the periodic flush.
  void FlushBeforeClose();

 private:
  void Arm();
  // The frame carrying what was recorded since the last flush, or "" if
  // nothing (a frame with no events when `request_id` is set: an answer).
  std::string TakeFrame(uint64_t request_id = 0);

  ThreadChecker io_thread_;
  TaskEventRecorder& recorder_;
  const std::chrono::milliseconds period_;
  std::weak_ptr<Connection> node_;
  boost::asio::steady_timer timer_;
  uint64_t reported_dropped_ = 0;
  std::string records_;  // the packed events of a flush; reused so its memory is too
  bool stopped_ = false;
};

}  // namespace lumen::runtime
