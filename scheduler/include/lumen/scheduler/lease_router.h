// Lease routing: where a worker-lease request should go, decided from the
// cluster view and this node's placement-group bundles. Pure logic, no sockets.
//
//   lumen::scheduler::LeaseRouteRequest request{.placement = need, .name = "Train"};
//   lumen::scheduler::LeaseRoutingInputs in{view, local_id, local_resources,
//                                           reserved_bundles, bundle_placements,
//                                           is_removed_group, has_address};
//   lumen::scheduler::LeaseRoute route = lumen::scheduler::RouteLease(request, in);
//   switch (route.kind) { case LeaseRouteKind::kGrantHere: ... }
//
// The decision, in order:
//   * a request for a placement group: refused when the group was removed;
//     granted here when one of its committed bundles on this node can ever hold
//     it; sent back to the requester's node (kRetry) when another node sent it
//     here for a bundle we do not hold; spilled to the node holding a bundle
//     that fits; refused when the group's bundles are all too small; else parked
//     until the group is placed.
//   * any other request: when another node sent it here (grant_or_reject),
//     kRetry if this node can never fit it; else granted, except a kDefault
//     request that does not fit here now (this node's view entry, net of its
//     queue) while the policy on this node's view would send it to another
//     node: kRetry (Ray's grant-or-reject; the sender's view was stale).
//     Otherwise the policy
//     (ClusterResourceView::PickNode) picks a node: this one (or one without a
//     known address) grants, another gets a spillback (and the view takes the
//     request from that node's available resources), no feasible node parks it,
//     an unmet hard node affinity refuses it.
//
// Not thread-safe; the function borrows its inputs for the call only.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "lumen/scheduler/cluster_view.h"
#include "lumen/scheduler/resource_set.h"

namespace lumen::scheduler {

// A placement-group bundle reserved on this node: prepared (its resources taken
// from the node), then committed (leases may use it).
struct ReservedBundle {
  std::unique_ptr<LocalResourceManager> resources;
  bool committed = false;
};

// Where the head placed a bundle ("group/index"), and its size when known.
struct BundlePlacement {
  std::string node_id;
  std::optional<ResourceSet> size;
};

// What the request asks for, decoded from the wire.
struct LeaseRouteRequest {
  ResourceSet placement;         // what must be free to grant it
  SchedulingStrategy strategy;
  std::string group;             // placement group (binary id), or ""
  int bundle_index = -1;         // -1: any bundle of the group
  bool grant_or_reject = false;  // another node sent it here
  std::string name;              // for messages
};

// Borrowed for one RouteLease call.
struct LeaseRoutingInputs {
  // The cluster, with this node's entry current (free resources net of queued
  // requests). RouteLease may Subtract a spilled request from a remote entry.
  ClusterResourceView& view;
  const std::string& local_node_id;
  const LocalResourceManager& local_resources;
  // "group/index" -> bundle reserved here.
  const absl::flat_hash_map<std::string, ReservedBundle>& reserved_bundles;
  // "group/index" -> where the head placed it.
  const absl::flat_hash_map<std::string, BundlePlacement>& bundle_placements;
  std::function<bool(const std::string& group)> is_removed_group;
  // Whether a spillback to this node is possible (its address is known).
  std::function<bool(const std::string& node_id)> has_address;
};

// The decision for one request.
enum class LeaseRouteKind {
  kGrantHere,  // queue it here (for `group`/`bundle_index` when it has a group)
  kSpillback,  // tell the requester to ask `node_id`
  kPark,       // keep it until the cluster changes (`infeasible`: no node fits it)
  kRefuse,     // fail it with `error`
  kRetry,      // the requester starts over at its own node
};

struct LeaseRoute {
  LeaseRouteKind kind = LeaseRouteKind::kRefuse;
  std::string node_id;      // kSpillback
  std::string error;        // kRefuse
  bool infeasible = false;  // kPark: no alive node's total fits (else: group not placed yet)
};

// Decides where `request` goes; see the file comment for the rules.
LeaseRoute RouteLease(const LeaseRouteRequest& request, const LeaseRoutingInputs& in);

// "group/index", the key of a bundle in the maps above.
std::string BundleKey(const std::string& group, int index);

// Whether `key` is a bundle of `group` (and of bundle `index`, when >= 0).
bool IsBundleOf(const std::string& key, const std::string& group, int index);

}  // namespace lumen::scheduler
