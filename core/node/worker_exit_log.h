// WorkerExitLog: how recent worker processes ended, for lease holders that ask
// (getWorkerExit) after a worker's connection closed. Keeps the last
// kMaxRecentExits exits, and the questions about workers still running until
// they are reaped or their deadline passes (at most kMaxWaitersPerClient per
// client).
//
//   WorkerExitLog log(io, max_wait);
//   log.Record(worker_id, exit);                      // answers its waiters
//   log.Ask(worker_id, client, request_id, timeout, running, [](const WorkerExit*) {...});
//
// Only on the node daemon's io thread (checked in debug builds); answers run on it.
#pragma once

#include <chrono>
#include <deque>
#include <functional>
#include <memory>

#include <boost/asio.hpp>

#include "absl/container/flat_hash_map.h"
#include "lumen/common/ids.h"
#include "lumen/common/thread_checker.h"
#include "core/node/worker_pool.h"
#include "lumen/proto/lumen.capnp.h"

namespace lumen::node {

class WorkerExitLog {
 public:
  static constexpr size_t kMaxRecentExits = 1024;
  static constexpr size_t kMaxWaitersPerClient = 256;
  // The answer: the exit, or nullptr when unknown (not of the asker's job, or
  // still running at the deadline). Runs once.
  using Answer = std::function<void(const WorkerExit*)>;

  WorkerExitLog(boost::asio::io_context& io, std::chrono::milliseconds max_wait)
      : io_(io), max_wait_(max_wait) {}

  // A worker was reaped: remembered, and its waiters answered.
  void Record(const WorkerId& id, WorkerExit exit);
  // How worker `id` ended, for a client of `job`: answered now when known (or
  // when it cannot wait: `running` false, timeout 0, too many waiters), else
  // when it is reaped or after min(timeout, max_wait).
  void Ask(const WorkerId& id, const JobId& job, uint64_t client, bool running,
           std::chrono::milliseconds timeout, Answer answer);

 private:
  struct Waiter {
    uint64_t client = 0;
    uint64_t serial = 0;
    Answer answer;
    std::shared_ptr<boost::asio::steady_timer> timer;
  };
  void Forget(uint64_t client);

  ThreadChecker io_thread_;
  boost::asio::io_context& io_;
  std::chrono::milliseconds max_wait_;
  absl::flat_hash_map<WorkerId, WorkerExit> recent_;
  std::deque<WorkerId> recent_order_;
  absl::flat_hash_map<WorkerId, std::vector<Waiter>> waiters_;
  absl::flat_hash_map<uint64_t, size_t> waiters_per_client_;
  uint64_t next_serial_ = 1;
};

// The answer to a getWorkerExit query: `exit`, or unknown (exit code -1)
// when null.
void FillWorkerExitInfo(const NodeId& node, const WorkerExit* exit,
                        proto::WorkerExitInfo::Builder info);

}  // namespace lumen::node
