// Where tasks and actors run: scheduling strategies and placement groups.
//
//   auto r = lumen::Task(Work).SetSchedulingStrategy(lumen::Spread()).Remote(i);
//   auto pg = lumen::CreatePlacementGroup({.bundles = {{{"CPU", 1}}, {{"CPU", 1}}},
//                                          .strategy = lumen::PlacementStrategy::STRICT_SPREAD});
//   if (!pg.Wait(std::chrono::seconds(10))) { /* not every bundle fits yet */ }
//   auto a = lumen::Actor(Worker::Create).SetPlacementGroup(pg, 0).Remote();
//   lumen::RemovePlacementGroup(pg.GetID());
//
// Thread-safe. Placement group calls ask the head (one round trip each) and
// throw lumen::PlacementGroupError when it cannot be reached or refuses.
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "lumen/internal/runtime.h"

namespace lumen {

// How a task or actor picks its node. The default is Ray's hybrid policy:
// the submitting node until it is half busy, then the least loaded node.
struct SchedulingStrategy {
  internal::SchedulingOptions::Kind kind = internal::SchedulingOptions::Kind::kDefault;
  std::string node_id;  // NodeAffinity: hex, as lumen::GetNodeId() / Nodes() give it
  bool soft = false;
};

// Spreads tasks over the nodes that fit them.
inline SchedulingStrategy Spread() { return {internal::SchedulingOptions::Kind::kSpread, "", false}; }
// Fills one node before using the next.
inline SchedulingStrategy Pack() { return {internal::SchedulingOptions::Kind::kPack, "", false}; }
// Runs on `node_id`; when that node is dead or too small: elsewhere if `soft`,
// else the task fails (an actor dies) with an error naming the node.
inline SchedulingStrategy NodeAffinity(std::string node_id, bool soft = false) {
  return {internal::SchedulingOptions::Kind::kNodeAffinity, std::move(node_id), soft};
}

enum class PlacementStrategy { PACK = 0, SPREAD = 1, STRICT_PACK = 2, STRICT_SPREAD = 3 };

struct PlacementGroupOptions {
  std::string name;
  std::vector<std::map<std::string, double>> bundles;
  PlacementStrategy strategy = PlacementStrategy::PACK;
};

// A gang reservation of resources across nodes. Copyable handle; removing the
// group (RemovePlacementGroup) frees its resources and ends what runs in it.
class PlacementGroup {
 public:
  PlacementGroup() = default;
  PlacementGroup(std::string id, size_t bundle_count)
      : id_(std::move(id)), bundle_count_(bundle_count) {}
  const std::string& GetID() const { return id_; }
  size_t BundleCount() const { return bundle_count_; }
  // True once every bundle is reserved (at once, on the nodes the strategy
  // chose); false when `timeout` passes first. Throws PlacementGroupError if
  // the group was removed.
  bool Wait(std::chrono::milliseconds timeout) const {
    return internal::WaitPlacementGroup(id_, timeout);
  }
  // The state ("PENDING", "CREATED", "REMOVED") and each bundle's node id.
  internal::PlacementGroupInfo Info() const { return internal::GetPlacementGroupInfo(id_); }

 private:
  std::string id_;
  size_t bundle_count_ = 0;
};

// Asks the head to reserve the bundles; returns at once (see Wait). A group
// that cannot fit waits (shown by `lumen status`) until nodes join or free up.
inline PlacementGroup CreatePlacementGroup(const PlacementGroupOptions& options) {
  internal::PlacementGroupRequest request{options.name, options.bundles,
                                          static_cast<int>(options.strategy)};
  return PlacementGroup(internal::CreatePlacementGroup(request), options.bundles.size());
}

inline void RemovePlacementGroup(const std::string& id) { internal::RemovePlacementGroup(id); }

namespace internal {

inline void ApplyStrategy(SchedulingOptions& options, const SchedulingStrategy& strategy) {
  options.kind = strategy.kind;
  options.node = NodeId::FromHex(strategy.node_id);
  options.soft = strategy.soft;
}

inline void ApplyPlacementGroup(SchedulingOptions& options, const PlacementGroup& group,
                                int bundle_index) {
  options.placement_group = group.GetID();
  options.bundle_index = bundle_index;
}

}  // namespace internal
}  // namespace lumen
