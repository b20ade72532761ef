// WorkerEventFlush: a driver about to stop asks its node daemons to flush
// (workerLogs with query.flush). Its workers' task events of the last
// flush period would otherwise die with them (they are killed when the job
// ends): the daemon asks each of the job's workers for its events now
// (getTaskEvents, node -> worker) and answers the driver once every worker
// answered (its taskEvents frame carries the request id) or at the deadline.
//
//   WorkerEventFlush flush(io, clients, std::chrono::milliseconds(1000));
//   flush.Start({worker_conn_a, worker_conn_b}, [] { /* answer the driver */ });
//   flush.OnAnswer(msg.getRequestId());   // a worker's taskEvents frame
//
// Only on the node daemon's io thread. Borrows `io` and `clients`.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include <boost/asio.hpp>

#include "absl/container/flat_hash_map.h"
#include "core/node/client_registry.h"

namespace lumen::node {

class WorkerEventFlush {
 public:
  WorkerEventFlush(boost::asio::io_context& io, ClientRegistry& clients,
                   std::chrono::milliseconds timeout)
      : io_(io), clients_(clients), timeout_(timeout) {}

  // Asks the workers on `worker_conns` for their events; `done` runs once,
  // on the io thread, when all answered, at the deadline, or at once if none
  // is connected.
  void Start(const std::vector<uint64_t>& worker_conns, std::function<void()> done);
  // A worker's taskEvents frame with a request id: one answer less to wait for.
  void OnAnswer(uint64_t request_id);

 private:
  struct Pending {
    size_t left = 0;
    std::function<void()> done;
    std::unique_ptr<boost::asio::steady_timer> deadline;
  };
  void Finish(uint64_t id);

  boost::asio::io_context& io_;
  ClientRegistry& clients_;
  const std::chrono::milliseconds timeout_;
  uint64_t next_id_ = 1;
  absl::flat_hash_map<uint64_t, Pending> pending_;
};

}  // namespace lumen::node
