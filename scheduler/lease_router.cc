#include "lumen/scheduler/lease_router.h"

#include "absl/strings/str_cat.h"
#include "lumen/common/ids.h"

namespace lumen::scheduler {

std::string BundleKey(const std::string& group, int index) {
  return absl::StrCat(group, "/", index);
}

bool IsBundleOf(const std::string& key, const std::string& group, int index) {
  if (index >= 0) return key == BundleKey(group, index);
  return key.size() > group.size() && key.compare(0, group.size(), group) == 0 &&
         key[group.size()] == '/';
}

namespace {

LeaseRoute Grant() { return LeaseRoute{LeaseRouteKind::kGrantHere, "", "", false}; }
LeaseRoute Retry() { return LeaseRoute{LeaseRouteKind::kRetry, "", "", false}; }
LeaseRoute Park(bool infeasible) { return LeaseRoute{LeaseRouteKind::kPark, "", "", infeasible}; }
LeaseRoute Refuse(std::string why) {
  return LeaseRoute{LeaseRouteKind::kRefuse, "", std::move(why), false};
}
LeaseRoute Spill(std::string node) {
  return LeaseRoute{LeaseRouteKind::kSpillback, std::move(node), "", false};
}

LeaseRoute RouteToGroup(const LeaseRouteRequest& request, const LeaseRoutingInputs& in) {
  const std::string& group = request.group;
  int index = request.bundle_index;
  if (in.is_removed_group && in.is_removed_group(group)) {
    return Refuse(absl::StrCat("placement group ", group, " was removed"));
  }
  for (const auto& [key, bundle] : in.reserved_bundles) {
    if (!bundle.committed || !IsBundleOf(key, group, index)) continue;
    if (bundle.resources->IsFeasible(request.placement)) return Grant();
  }
  // Where a bundle that can hold it is (alive nodes only; another node first).
  std::string target;
  bool any_bundle = false;
  for (const auto& [key, where] : in.bundle_placements) {
    if (!IsBundleOf(key, group, index)) continue;
    any_bundle = true;
    if (where.size && !request.placement.IsSubsetOf(*where.size)) continue;
    bool local = where.node_id == in.local_node_id;
    const NodeResources* node = in.view.Find(where.node_id);
    if (!local && (node == nullptr || !node->alive)) continue;
    target = where.node_id;
    if (!local) break;
  }
  // Sent here for a bundle we do not have (any more): start over.
  if (request.grant_or_reject) return Retry();
  if (!target.empty() && target != in.local_node_id && in.has_address(target)) {
    return Spill(target);
  }
  if (any_bundle && target.empty()) {
    return Refuse(absl::StrCat(request.name, " needs ", request.placement.ToString(),
                               ", more than its placement group bundle holds"));
  }
  // The group is not placed yet (or its bundle's node just died): wait.
  return Park(/*infeasible=*/false);
}

}  // namespace

LeaseRoute RouteLease(const LeaseRouteRequest& request, const LeaseRoutingInputs& in) {
  if (!request.group.empty()) return RouteToGroup(request, in);
  if (request.grant_or_reject) {
    // Another node sent it here: run it here if it can ever fit, else start over.
    if (!in.local_resources.IsFeasible(request.placement)) return Retry();
    if (request.strategy.kind != StrategyKind::kDefault) return Grant();
    // kDefault: the sender chose this node from its view, whose estimates of
    // other nodes can be stale (a view from the head puts a node's last
    // reported state back before that node has reported the leases just
    // spilled to it). Queued behind busy CPUs here, the request could wait
    // for ever while another node has room (six tasks meeting at a barrier on
    // three 2-CPU nodes: the third sent to a full node never runs). So, as
    // Ray's grant-or-reject: granted when it fits here now (this node's entry
    // is net of its queue), or when the policy on this node's own view keeps
    // it here (no node fits it now); otherwise the requester starts over at
    // its own node, whose view has caught up by then or soon after.
    const NodeResources* self = in.view.Find(in.local_node_id);
    const ResourceSet& free_here = self != nullptr ? self->available
                                                   : in.local_resources.available();
    if (request.placement.IsSubsetOf(free_here)) return Grant();
    auto pick = in.view.PickNode(request.placement, request.strategy, in.local_node_id);
    return pick.ok() && pick->node_id != in.local_node_id ? Retry() : Grant();
  }
  auto pick = in.view.PickNode(request.placement, request.strategy, in.local_node_id);
  if (!pick.ok()) {
    if (request.strategy.kind == StrategyKind::kNodeAffinity && !request.strategy.soft) {
      return Refuse(absl::StrCat(request.name, " must run on node ",
                                 NodeId::FromBinary(request.strategy.node_id).Hex(),
                                 " (NodeAffinity, soft=false), which cannot run it: ",
                                 pick.status().message()));
    }
    return Park(/*infeasible=*/true);
  }
  if (pick->node_id == in.local_node_id || !in.has_address(pick->node_id)) return Grant();
  in.view.Subtract(pick->node_id, request.placement);
  return Spill(pick->node_id);
}

}  // namespace lumen::scheduler
