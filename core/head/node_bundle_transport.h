// NodeBundleTransport: the placement-group manager's BundleTransport over the
// head's node connections. A request becomes a prepareBundles, commitBundles
// or cancelBundles frame whose request id is the manager's ticket and whose
// retry key is (this head's RetryClientId(), ticket), so a resent request is
// recognised by the node; the node's bundleReply comes back through
// PlacementGroupService, which hands it to the manager.
//
//   NodeBundleTransport transport(&nodes, [&](uint64_t id) { return FindOpenConnection(id); });
//   PlacementGroupManager pgs({.transport = &transport, ...});
//
// Only on the head's event loop. `nodes` is borrowed and outlives it.
#pragma once

#include <cstdint>
#include <functional>

#include "core/head/node_table.h"
#include "lumen/common/connection.h"
#include "lumen/scheduler/bundle_transport.h"

namespace lumen::head {

class NodeBundleTransport : public scheduler::BundleTransport {
 public:
  NodeBundleTransport(const NodeTable* nodes, std::function<Connection*(uint64_t)> find_connection)
      : nodes_(nodes), find_connection_(std::move(find_connection)) {}

  // Errors: NotFound when the node is unknown or dead; Unavailable when it is
  // alive but disconnected (its link reset; it may register again).
  [[nodiscard]] absl::Status Send(const scheduler::BundleRequest& request) override;

 private:
  const NodeTable* nodes_;
  std::function<Connection*(uint64_t)> find_connection_;
};

}  // namespace lumen::head
