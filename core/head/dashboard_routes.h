// DashboardRoutes: the head's dashboard on its HTTP server: the page at "/"
// (with /app.js and /style.css, embedded in the binary) and GET /api/cluster,
// the JSON the page polls (RenderClusterJson), answered once the live nodes
// have said what their processes own (NodeStateGatherer).
//
//   DashboardRoutes dashboard({.io = &io, .http = http.get(), .token = token,
//                              .node_timeout = 2s,
//                              .fill_nodes = [&](auto& message) {...},
//                              .fill_groups = [&](auto& message) {...}});
//   dashboard.Install();
//
// The page itself holds no cluster data, so it is served to anyone who can
// reach the port (HttpServer::Access::kOpen); /api/cluster follows the
// server's token rule (beyond loopback the page sends the token it finds in
// its address's fragment, `#token=...`, which browsers never send on).
//
// Only on the head's io thread. Borrows `io` and `http`, which outlive it.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include <boost/asio.hpp>
#include <capnp/message.h>

#include "core/head/http_server.h"
#include "core/head/node_state_gatherer.h"
#include "lumen/proto/lumen.capnp.h"

namespace lumen::head {

class DashboardRoutes {
 public:
  struct Options {
    boost::asio::io_context* io = nullptr;  // borrowed
    HttpServer* http = nullptr;             // borrowed
    std::string token;                      // for the head's connections to the nodes
    std::chrono::milliseconds node_timeout{2000};
    // Writes the head's node table (alive and dead) into `out`.
    std::function<void(capnp::MallocMessageBuilder& out)> fill_nodes;  // root: ClusterView
    // Writes every placement group into `out` (root: Envelope, placementGroups set).
    std::function<void(capnp::MallocMessageBuilder& out)> fill_groups;
  };

  explicit DashboardRoutes(Options options);

  // Registers "/", "/index.html", "/app.js", "/style.css" and "/api/cluster".
  void Install();

  // Writes the node table into `*nodes` (fill_nodes) and asks the live ones
  // what their processes own (one gathering round, shared with the page's).
  void GatherFromLiveNodes(const std::shared_ptr<capnp::MallocMessageBuilder>& nodes,
                           NodeStateGatherer::Done done);

 private:
  void AnswerCluster(HttpServer::Respond respond);

  Options options_;
  NodeStateGatherer gatherer_;
};

}  // namespace lumen::head
