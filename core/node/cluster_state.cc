#include "core/node/cluster_state.h"

#include "absl/strings/str_cat.h"
#include "lumen/common/proto_util.h"

namespace lumen::node {

ClusterState::Changes ClusterState::Apply(proto::ClusterView::Reader view) {
  io_thread_.Check("ClusterState");
  Changes changes;
  // Our estimates between two reports (spilled leases taken off a node's
  // available resources) give way to what the nodes reported; the view below
  // brings only the nodes that changed since.
  for (const std::string& key : view_.TakeAdjusted()) {
    auto it = reported_.find(key);
    if (key != local_key_ && it != reported_.end()) view_.Upsert(key, it->second);
  }
  for (auto n : view.getNodes()) {
    std::string key = StringOf(n.getNodeId());
    if (key == local_key_) {
      // The lease manager keeps our resources current; our store use comes
      // back here from our own report (the head sends our entry when its
      // store level changed).
      if (const scheduler::NodeResources* self = view_.Find(key)) {
        scheduler::NodeResources updated = *self;
        updated.store_used = n.getStoreUsed();
        updated.store_capacity = n.getStoreCapacity();
        view_.Upsert(key, std::move(updated));
      }
      continue;
    }
    auto total = scheduler::ResourceSet::FromMap(ReadResources(n.getTotal()));
    auto available = scheduler::ResourceSet::FromMap(ReadResources(n.getAvailable()));
    if (!total.ok() || !available.ok()) continue;
    const scheduler::NodeResources* known = view_.Find(key);
    if (known != nullptr && known->alive && !n.getAlive()) changes.died.push_back(key);
    scheduler::NodeResources reported{*total, *available, n.getAlive(), n.getStoreUsed(),
                                      n.getStoreCapacity()};
    view_.Upsert(key, reported);
    reported_[key] = std::move(reported);
    node_addresses_[key] = n.getAddress().cStr();
    node_transfer_[key] = n.getTransferAddress().cStr();
  }
  for (auto job : view.getEndedJobs()) {
    JobId id = IdFrom<JobId>(job);
    if (!ended_jobs_.Contains(id)) changes.ended_jobs.push_back(id);
  }
  if (!view.getBundlesUnchanged()) bundle_placements_.clear();
  for (auto b : view.getBundles()) {
    auto& placement = bundle_placements_[scheduler::BundleKey(StringOf(b.getGroupId()), b.getIndex())];
    placement.node_id = StringOf(b.getNodeId());
    auto size = scheduler::ResourceSet::FromMap(ReadResources(b.getResources()));
    if (size.ok()) placement.size = *size;
  }
  for (auto g : view.getRemovedGroups()) {
    std::string group = StringOf(g);
    if (removed_groups_.Insert(group)) changes.removed_groups.push_back(group);
  }
  return changes;
}

std::string ClusterState::AddressOf(const std::string& node) const {
  auto it = node_addresses_.find(node);
  return it == node_addresses_.end() ? "" : it->second;
}

std::string ClusterState::TransferAddressOf(const std::string& node) const {
  auto it = node_transfer_.find(node);
  return it == node_transfer_.end() ? "" : it->second;
}

}  // namespace lumen::node
