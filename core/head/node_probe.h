// NodeProbe: when a node's connection to the head closes, is its daemon gone
// or only its link? The head keeps a disconnected node for the health-check
// grace (doc/reliability.md, item 8); a daemon that died (SIGKILL, a crash)
// closes its connection too, and waiting out the grace for it would delay its
// tasks' and objects' recovery. So the head tries to connect to the node's
// advertised TCP address once: a refusal (nothing listens there any more), or
// an accepted connection reset before `timeout` (the listening socket of a
// dying process closed with it in its backlog), is a death, declared at once;
// a connection still open at the timeout, an orderly close, or any other
// error says nothing, and the grace runs on.
//
//   NodeProbe probe(io, std::chrono::milliseconds(500));
//   probe.Probe(id, "10.0.0.2:41000;/tmp/...sock", [&](const NodeId& id) { /* gone */ });
//
// Only on the head's event loop; `on_gone` runs on it. Attempts in flight
// when the probe is destroyed are abandoned (their handlers do nothing).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include <boost/asio.hpp>

#include "lumen/common/ids.h"

namespace lumen::head {

class NodeProbe {
 public:
  NodeProbe(boost::asio::io_context& io, std::chrono::milliseconds timeout)
      : io_(io), timeout_(timeout), alive_(std::make_shared<bool>(true)) {}
  ~NodeProbe() { *alive_ = false; }
  NodeProbe(const NodeProbe&) = delete;
  NodeProbe& operator=(const NodeProbe&) = delete;

  // Connects to the TCP part of `address` ("host:port[;unix path]");
  // `on_gone(id)` when the connection is refused or reset (above). Nothing
  // without a TCP part.
  void Probe(const NodeId& id, const std::string& address,
             std::function<void(const NodeId&)> on_gone);

  // Probes started, and refusals seen (for tests and logs).
  uint64_t probes() const { return probes_; }
  uint64_t refused() const { return refused_; }

 private:
  boost::asio::io_context& io_;
  std::chrono::milliseconds timeout_;
  std::shared_ptr<bool> alive_;  // false once destroyed: late handlers return
  uint64_t probes_ = 0;
  uint64_t refused_ = 0;
};

}  // namespace lumen::head
