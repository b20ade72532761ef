// NodeStateGatherer: asks every live node, at once and without blocking the
// head's loop, for what the dashboard shows beyond the head's own tables: the
// actors and tasks its drivers and workers own (`listState`, as `lumen list`
// asks) and its recent failures (`getNodeStats`, whose answer carries
// NodeStats.dashboard). One short-lived connection per node, as a CLI client.
//
//   NodeStateGatherer gatherer({.io = &io, .token = token, .timeout = 2s});
//   gatherer.Gather({{node_id, "127.0.0.1:4100;/tmp/.../node.sock"}},
//                   [](std::vector<NodeAnswer> answers) { ... });
//
// A node that does not answer within `timeout` is reported with its error and
// whatever it had sent. A Gather while another is in flight joins it (its
// callback gets that round's answers), so many open dashboards cost one round.
//
// Only on the head's io thread (checked in debug builds); callbacks run there.
// Borrows `io`, which outlives the gatherer; rounds in flight when it is
// destroyed still finish (they own their state) and call back.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio.hpp>

#include "absl/status/status.h"
#include "lumen/common/head_client.h"
#include "lumen/common/ids.h"
#include "lumen/common/thread_checker.h"

namespace lumen::head {

// A failure a node remembers (proto FailureRecord).
struct FailureView {
  int64_t time_us = 0;  // system clock, microseconds since the epoch
  std::string kind;     // "task", "actor call" or "worker"
  std::string task_id;  // hex, or "" for a worker
  std::string message;
  int32_t pid = 0;
};

// What one node answered.
struct NodeAnswer {
  NodeId node;
  absl::Status status;  // OK, or why (part of) its answer is missing
  std::vector<runtime::StateRow> actors;
  std::vector<runtime::StateRow> tasks;
  std::vector<FailureView> failures;
};

class NodeStateGatherer {
 public:
  struct Options {
    boost::asio::io_context* io = nullptr;  // borrowed
    std::string token;                      // sent in the hello (nodes beyond loopback need it)
    std::chrono::milliseconds timeout{2000};
  };
  struct Target {
    NodeId id;
    std::string address;  // the node daemon's address
  };
  // Called once per Gather, with one answer per target, in target order.
  using Done = std::function<void(std::vector<NodeAnswer>)>;

  explicit NodeStateGatherer(Options options) : options_(std::move(options)) {}

  void Gather(std::vector<Target> targets, Done done);

 private:
  struct Round;
  struct NodeCall;
  void Ask(const std::shared_ptr<Round>& round, size_t index, const Target& target);

  ThreadChecker io_thread_;
  Options options_;
  std::weak_ptr<Round> in_flight_;
};

}  // namespace lumen::head
