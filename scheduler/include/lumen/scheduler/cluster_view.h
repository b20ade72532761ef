// What the scheduler knows of the cluster's nodes, and where work should go.
//
// Provides `ClusterResourceView`, a map from node id (an opaque string) to that
// node's total and available resources and whether it is alive, together with
// the pure scheduling policies that decide placement from it:
//
//   * PickNode: the node for one task or actor (Ray's hybrid default policy,
//     SPREAD, PACK, node affinity), and
//   * PlaceBundles: a node per bundle of a placement group (PACK, SPREAD,
//     STRICT_PACK, STRICT_SPREAD).
//
// The view is either a node daemon's copy of the head's view or the head's
// own; it is refreshed by resource reports (Upsert) and between reports the
// scheduler keeps it roughly current by taking what it hands out (Subtract)
// and giving it back when the work ends (Add). No networking here.
//
//   lumen::scheduler::ClusterResourceView view;
//   view.Upsert("node-a", {.total = a_total, .available = a_free});
//   view.Upsert("node-b", {.total = b_total, .available = b_free});
//   ASSIGN_OR_RETURN(lumen::scheduler::Placement where,
//                    view.PickNode(request, {}, /*local_node_id=*/"node-a"));
//   if (where.available_now) view.Subtract(where.node_id, request);
//
// Value type; not thread-safe (owned by one event loop, or guarded externally).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "lumen/scheduler/resource_set.h"

namespace lumen::scheduler {

// How PickNode chooses a node for one task or actor.
enum class StrategyKind { kDefault, kSpread, kPack, kNodeAffinity };

struct SchedulingStrategy {
  StrategyKind kind = StrategyKind::kDefault;
  // kNodeAffinity: the node to run on.
  std::string node_id;
  // kNodeAffinity: fall back to kDefault when the node is dead, unknown or too
  // small for the request; when false such a request fails.
  bool soft = false;
};

// How PlaceBundles spreads a placement group's bundles over nodes.
enum class PlacementStrategy { kPack, kSpread, kStrictPack, kStrictSpread };

// "PACK", "SPREAD", "STRICT_PACK" or "STRICT_SPREAD".
std::string_view PlacementStrategyName(PlacementStrategy strategy);

// A node's object store is "nearly full" when at least this fraction of its
// capacity is in use (NodeResources::StoreFraction() >= it). kDefault placement
// does not choose such a node while a feasible node below it exists (PickNode).
inline constexpr double kStoreNearlyFull = 0.8;

// One node as the view knows it.
struct NodeResources {
  ResourceSet total;
  ResourceSet available;
  bool alive = true;
  // Its object store, in bytes, as the node last reported it (NodeStats
  // storeUsed / storeCapacity). A capacity of 0 means unknown: the store then
  // counts as empty.
  uint64_t store_used = 0;
  uint64_t store_capacity = 0;

  // store_used / store_capacity in [0, 1]; 0 when the capacity is unknown.
  double StoreFraction() const;
  bool StoreNearlyFull() const { return StoreFraction() >= kStoreNearlyFull; }
};

// Where PickNode sends a request.
struct Placement {
  std::string node_id;
  // True when the node has the request free right now; false when it only
  // fits the node's total (the request waits there for resources).
  bool available_now = false;
};

class ClusterResourceView {
 public:
  // Adds the node or replaces everything known about it.
  void Upsert(const std::string& node_id, NodeResources resources);
  // Forgets the node; no-op when unknown.
  void Remove(const std::string& node_id);
  // Keeps the node but never places anything on it again (until an Upsert
  // says it is alive); no-op when unknown.
  void MarkDead(const std::string& node_id);

  // The node, or nullptr when unknown.
  const NodeResources* Find(const std::string& node_id) const;
  // Every known node, dead ones included, in node id order.
  const std::map<std::string, NodeResources>& nodes() const { return nodes_; }

  // Optimistically takes `request` from the node's available resources
  // (between two reports from it). Clamps each quantity at 0 when the view
  // has less than requested. No-op for an unknown node.
  void Subtract(const std::string& node_id, const ResourceSet& request);
  // Gives `request` back to the node's available resources, capped at its
  // total. No-op for an unknown node.
  void Add(const std::string& node_id, const ResourceSet& request);
  // The nodes Subtract or Add changed since the last call, in id order; the
  // list is cleared. (A node daemon puts their reported state back with each
  // view from the head, which sends only what changed.)
  std::vector<std::string> TakeAdjusted();

  // True when some alive node's total fits `request`.
  bool IsFeasibleAnywhere(const ResourceSet& request) const;

  // The node a task or actor with `request` should go to; `local_node_id` is
  // the node asking (it may be unknown to the view). Never returns a dead
  // node. Fails with FailedPrecondition when no alive node's total fits the
  // request (it is infeasible) or when a hard node affinity cannot be met
  // (the node is unknown, dead or too small; the message says which).
  //
  // "Utilisation" of a node below is the highest fraction in use,
  // (total - available) / total, over the resources named in `request` plus
  // CPU, counting only those the node has (total > 0); 0 when it has none of
  // them. Resources the request does not touch (and that are not CPU) do not
  // make a node look busy for it. "Fits now" is request <= available;
  // "feasible" is request <= total, on an alive node.
  //
  //  - kDefault (Ray's hybrid policy, plus the object store): utilisation
  //    here also counts the node's store fraction (the max of the above and
  //    store_used / store_capacity), and a node whose store is nearly full
  //    (StoreNearlyFull) is left out while some feasible node's store is not;
  //    when every feasible node's store is nearly full none is left out. Then:
  //    the local node when it is alive, fits now and its utilisation is below
  //    `spread_threshold`. Otherwise the node that fits now with the lowest
  //    utilisation (ties: the local node, then node id order). When no node
  //    fits now: the local node if it is feasible, else the feasible node with
  //    the lowest utilisation (ties as above), with available_now = false.
  //  - kSpread: round robin in node id order over the alive nodes that fit
  //    now, or when none does over the feasible ones (available_now =
  //    false). The view remembers the last node it picked this way and
  //    starts after it, so successive calls cycle through the nodes even as
  //    nodes come and go.
  //  - kPack: the node that fits now with the highest utilisation (ties: the
  //    local node, then node id order); when none fits now, as kDefault's
  //    last step but without the store (kSpread and kPack ignore stores).
  //  - kNodeAffinity: strategy.node_id when it is alive and feasible
  //    (available_now tells whether it fits now); otherwise kDefault when
  //    soft, else FailedPrecondition.
  absl::StatusOr<Placement> PickNode(const ResourceSet& request,
                                     const SchedulingStrategy& strategy,
                                     const std::string& local_node_id,
                                     double spread_threshold = 0.5);

  // Chooses a node for each of a placement group's `bundles`, against the
  // available resources of alive nodes, and returns the node ids in the order
  // of `bundles` (a node may appear several times, except for STRICT_SPREAD).
  // Reserves nothing: the caller Subtracts what it commits.
  //
  // Fails with InvalidArgument when `bundles` is empty; ResourceExhausted when
  // the group cannot be placed now but could be on the alive nodes' totals
  // (wait for resources and retry); FailedPrecondition when the alive nodes'
  // totals can never hold it (no alive node, a bundle bigger than every node,
  // STRICT_SPREAD with more bundles than alive nodes, STRICT_PACK bigger than
  // every node, ...).
  //
  // "Most free room" below is the lowest utilisation as in PickNode,
  // computed over the resources named in any bundle plus CPU, counting what
  // this call already put on the node; ties go in node id order.
  //
  //  - kStrictPack: all bundles on one node, the one with the most free room
  //    among those that fit their sum.
  //  - kPack: as kStrictPack when possible; else greedily keeps putting
  //    bundles (in order) on the current node while they fit, then moves to
  //    the node with the most free room that fits the next bundle. If that
  //    greedy pass fails, any assignment that fits is used (a search that
  //    prefers fuller nodes).
  //  - kStrictSpread: each bundle on a different node: bundles largest first,
  //    each on the node with the most free room, backtracking when stuck.
  //  - kSpread: as kStrictSpread when possible; else nodes holding the fewest
  //    of this group's bundles first (then most free room), so nodes are
  //    reused only when needed.
  //
  // The searches are exhaustive for the small groups this is meant for; a
  // pathological group that exceeds the search's step budget is reported as
  // ResourceExhausted rather than FailedPrecondition, since it was not proven
  // impossible.
  absl::StatusOr<std::vector<std::string>> PlaceBundles(const std::vector<ResourceSet>& bundles,
                                                        PlacementStrategy strategy) const;

 private:
  std::map<std::string, NodeResources> nodes_;
  std::set<std::string> adjusted_;  // changed by Subtract/Add since TakeAdjusted
  // The node kSpread picked last (none yet: nullopt); the next kSpread pick
  // starts after it.
  std::optional<std::string> last_spread_node_;
};

}  // namespace lumen::scheduler
