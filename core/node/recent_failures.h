// RecentFailures: the node's short list of what went wrong lately, for the
// head's dashboard: tasks that failed for good (their owners' FAILED events,
// flushed to this node) and worker processes that died without being asked
// to (a crash, a signal from outside, a non-zero exit). Keeps the last
// kMaxFailures, oldest first; the answer to getNodeStats carries them
// (NodeStats.dashboard.failures), the periodic reports to the head do not.
//
//   RecentFailures failures;
//   failures.OnTaskEvents(events);                 // a process's flushed batch
//   failures.OnWorkerExit(worker.kill_reason, exit);  // a reaped worker
//   failures.Fill(stats.initDashboard());          // answering getNodeStats
//
// Only on the node daemon's io thread (checked in debug builds).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "core/node/worker_pool.h"
#include "lumen/common/ids.h"
#include "lumen/common/task_events.h"
#include "lumen/common/thread_checker.h"
#include "lumen/proto/lumen.capnp.h"

namespace lumen::node {

class RecentFailures {
 public:
  static constexpr size_t kMaxFailures = 32;

  struct Failure {
    int64_t time_us = 0;  // system clock, microseconds since the epoch
    std::string kind;     // "task", "actor call" or "worker"
    TaskId task_id;       // nil for a worker
    std::string message;  // the task's error, or how the worker ended
    int32_t pid = 0;      // the task's owner, or the worker
  };

  // Remembers the FAILED events among `events`.
  void OnTaskEvents(const std::vector<TaskEvent>& events);
  // A worker was reaped: remembered unless the daemon killed it on purpose
  // (`kill_reason` not empty: idle, job ended, lease killed) or it exited 0.
  void OnWorkerExit(const std::string& kill_reason, const WorkerExit& exit);
  // Writes the list, oldest first.
  void Fill(proto::NodeDashboard::Builder out) const;


 private:
  void Add(Failure failure);

  ThreadChecker io_thread_;
  std::deque<Failure> failures_;
};

}  // namespace lumen::node
