// BundleCancels: the placement-group manager's bundle cancels, each kept until
// its node acknowledges it (the node's bundleReply to the cancel's ticket).
// A cancel the transport could not send (the node is alive but disconnected:
// Unavailable) waits; one that was written to a connection that then died may
// never have reached the node. Both go (again) when the node registers again,
// oldest first, with their tickets, which the transport turns into the
// request's retry key: a node that did apply a cancel answers the resend from
// its table without applying it twice (core/node/keyed_requests.h). Dropped
// when the node dies (its bundles went with it).
//
//   BundleCancels cancels(&transport);
//   cancels.Send(request);                    // phase kCancel, a fresh ticket
//   if (cancels.OnReply(ticket)) return;      // a cancel's acknowledgement
//   cancels.OnNodeReconnected(node_id);       // resend what it may have missed
//   cancels.OnNodeDead(node_id);              // forget
//
// A cancel resent on the new connection comes before any new prepare there
// (the manager reaches a node only once it registered again), so it never
// releases a reservation made after it. Pure logic; not thread-safe (the
// manager's thread).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

#include "lumen/scheduler/bundle_transport.h"

namespace lumen::scheduler {

class BundleCancels {
 public:
  explicit BundleCancels(BundleTransport* transport) : transport_(transport) {}

  // Sends `request` (phase kCancel, a ticket unique among the manager's) and
  // keeps it until OnReply(request.ticket) or the node's death.
  void Send(BundleRequest request);
  // True when `ticket` is a kept cancel's: it is acknowledged and forgotten.
  bool OnReply(uint64_t ticket);
  // The node registered again: every cancel kept for it goes now, oldest first.
  void OnNodeReconnected(const std::string& node_id);
  // The node is gone: its cancels are dropped.
  void OnNodeDead(const std::string& node_id);

  // Cancels not sent yet (their node was disconnected).
  size_t unsent() const;
  // Cancels kept: not sent, or sent and not acknowledged yet.
  size_t kept() const;
  // Cancels sent again after their node registered again (tests, logs).
  uint64_t resent() const { return resent_; }

 private:
  struct Kept {
    BundleRequest request;
    bool sent = false;
  };
  // Sends `kept` (marked sent when it went): the transport's error code.
  absl::StatusCode TrySend(Kept& kept);

  BundleTransport* transport_;  // borrowed
  std::map<std::string, std::map<uint64_t, Kept>> by_node_;  // node -> ticket -> cancel
  std::map<uint64_t, std::string> node_of_;                   // ticket -> node
  uint64_t resent_ = 0;
};

}  // namespace lumen::scheduler
