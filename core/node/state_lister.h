// StateLister: answers `lumen list actors|tasks|objects` and `lumen memory` sent to this node by
// asking every local driver and worker for its rows and merging them (each row
// prefixed with NODE_DAEMON = this node's short id). A process that does not
// answer within the timeout is left out.
//
//   StateLister lister(io, clients, node_short_id, timeouts.list_state_timeout);
//   lister.List(conn, request_id, "actors");   // on a listState frame
//   lister.OnRows(msg);                        // on each stateRows frame
//
// Only on the node daemon's io thread. Borrows the io_context and the registry.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <boost/asio.hpp>

#include "absl/container/flat_hash_map.h"
#include "core/node/client_registry.h"
#include "lumen/common/connection.h"
#include "lumen/common/thread_checker.h"

namespace lumen::node {

class StateLister {
 public:
  StateLister(boost::asio::io_context& io, ClientRegistry& clients, std::string node_short_id,
              std::chrono::milliseconds timeout)
      : io_(io), clients_(clients), node_(std::move(node_short_id)), timeout_(timeout) {}

  using Row = std::vector<std::pair<std::string, std::string>>;
  // Starts a listing of `what` for `requester`; answered with request id
  // `request_id`. `own_rows` are the daemon's own (e.g. its store's), listed first.
  void List(Connection& requester, uint64_t request_id, const std::string& what,
            std::vector<Row> own_rows = {});
  // A local process's rows (its stateRows frame).
  void OnRows(proto::Envelope::Reader msg);

 private:
  struct Listing {
    std::weak_ptr<Connection> requester;
    uint64_t request_id = 0;
    int pending = 0;
    bool done = false;
    std::vector<Row> rows;
    std::unique_ptr<boost::asio::steady_timer> timer;
  };
  void Finish(const std::shared_ptr<Listing>& listing);

  ThreadChecker io_thread_;
  boost::asio::io_context& io_;
  ClientRegistry& clients_;
  std::string node_;
  std::chrono::milliseconds timeout_;
  // Our request id to a local process -> the listing it answers.
  absl::flat_hash_map<uint64_t, std::shared_ptr<Listing>> requests_;
  uint64_t next_request_id_ = 1;
};

}  // namespace lumen::node
