// ClusterState: the cluster as the head last described it to this node — each
// node's resources and liveness (the scheduler's view, with this node's own
// entry kept current by the lease manager), node and transfer addresses, where
// the placement-group bundles are, and which jobs ended and which groups were
// removed (both bounded: the head keeps the last ~1000 of each, so the node
// keeps at most kRememberedIds of each, oldest forgotten first).
//
//   ClusterState state(local_key);
//   ClusterState::Changes changes = state.Apply(view_reader);
//   for (const std::string& node : changes.died) ...
//
// Only on the node daemon's io thread (checked in debug builds).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "lumen/common/ids.h"
#include "lumen/common/recent_set.h"
#include "lumen/common/thread_checker.h"
#include "lumen/proto/lumen.capnp.h"
#include "lumen/scheduler/cluster_view.h"
#include "lumen/scheduler/lease_router.h"

namespace lumen::node {

class ClusterState {
 public:
  // Ended jobs and removed groups remembered (more than the head sends).
  static constexpr size_t kRememberedIds = 4096;

  explicit ClusterState(std::string local_key) : local_key_(std::move(local_key)) {}

  // What a cluster view changed.
  struct Changes {
    std::vector<std::string> died;            // node id bytes: alive before, dead now
    std::vector<JobId> ended_jobs;            // not known to have ended before
    std::vector<std::string> removed_groups;  // not known to be removed before
  };
  // Takes in a view from the head: a change since the previous one (of this
  // node's own entry only its store use is taken: the lease manager keeps its
  // resources). Its nodes are upserted (the others stay
  // as they were); its bundles replace ours unless it says bundlesUnchanged.
  // O(the view's size).
  Changes Apply(proto::ClusterView::Reader view);

  const std::string& local_key() const { return local_key_; }
  scheduler::ClusterResourceView& view() { return view_; }
  bool HasAddress(const std::string& node) const { return node_addresses_.contains(node); }
  // The node daemon's address of `node`, or "".
  std::string AddressOf(const std::string& node) const;
  // Where other nodes pull `node`'s objects from, or "".
  std::string TransferAddressOf(const std::string& node) const;

  // "group/index" -> where the head placed it.
  absl::flat_hash_map<std::string, scheduler::BundlePlacement>& bundle_placements() {
    return bundle_placements_;
  }
  bool IsRemovedGroup(const std::string& group) const { return removed_groups_.Contains(group); }
  bool IsEndedJob(const JobId& job) const { return ended_jobs_.Contains(job); }
  // Returns true if the job was not known to have ended.
  bool MarkJobEnded(const JobId& job) { return ended_jobs_.Insert(job); }

 private:
  ThreadChecker io_thread_;
  std::string local_key_;
  scheduler::ClusterResourceView view_;
  // Each other node as the head last described it (view_ may hold our
  // estimates since; they are reset to this with each view).
  absl::flat_hash_map<std::string, scheduler::NodeResources> reported_;
  absl::flat_hash_map<std::string, std::string> node_addresses_;  // node id bytes -> address
  absl::flat_hash_map<std::string, std::string> node_transfer_;   // node id bytes -> transfer address
  absl::flat_hash_map<std::string, scheduler::BundlePlacement> bundle_placements_;
  RecentSet<std::string> removed_groups_{kRememberedIds};
  RecentSet<JobId> ended_jobs_{kRememberedIds};
};

}  // namespace lumen::node
