// ClusterViewPublisher: builds and sends the cluster view each node gets after
// its reports and whenever the cluster changes: every node's last report (with
// the head's verdict on whether it lives), every committed bundle (nodes route
// leases by them), and, since that node's previous view, the jobs that ended
// and the placement groups that were removed.
//
// Ended jobs and removed groups are sent as changes: the publisher remembers,
// per node, how far into each ChangeLog it has sent, so the message does not
// grow with the cluster's history. A node that joins gets every change still
// retained. Committed bundles are sent whole (nodes replace theirs with each
// view); they are bounded by the live placement groups (HeadLimits).
//
//   ClusterViewPublisher views({.nodes = &nodes, .jobs = &jobs, .groups = &pgs.manager(),
//                               .removed_groups = &pgs.removed(), .send = send_on_connection});
//   views.SendTo(node_id);   // after its report
//   views.Broadcast();       // a node joined or died, a group was created or removed
//   views.Forget(node_id);   // it died
//
// Only on the head's event loop (checked in debug builds). Borrowed sources
// outlive the publisher.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include <capnp/message.h>

#include "absl/container/flat_hash_map.h"
#include "core/head/change_log.h"
#include "core/head/job_table.h"
#include "core/head/node_table.h"
#include "lumen/common/ids.h"
#include "lumen/common/thread_checker.h"
#include "lumen/scheduler/placement_group_manager.h"

namespace lumen::head {

class ClusterViewPublisher {
 public:
  struct Sources {
    const NodeTable* nodes = nullptr;
    const JobTable* jobs = nullptr;
    const scheduler::PlacementGroupManager* groups = nullptr;
    const ChangeLog<std::string>* removed_groups = nullptr;  // removed group ids
    // Sends `message` on the connection with that id; false when it is closed
    // (nothing sent).
    std::function<bool(uint64_t conn_id, capnp::MessageBuilder& message)> send;
  };

  explicit ClusterViewPublisher(Sources sources) : sources_(std::move(sources)) {}

  // Sends `node` its view, if it is alive and its connection is open.
  void SendTo(const NodeId& node);
  // Sends every alive node its view.
  void Broadcast();
  // Forgets what was sent to `node` (it died; a node never comes back under
  // the same id).
  void Forget(const NodeId& node) { sent_.erase(node); }

  // Fills `view` for a node that has seen changes up to `jobs_seen` and
  // `removals_seen`.
  void Fill(proto::ClusterView::Builder view, uint64_t jobs_seen, uint64_t removals_seen) const;

 private:
  // How far into each change log a node's views went.
  struct Cursor {
    uint64_t jobs_seen = 0;
    uint64_t removals_seen = 0;
  };

  Sources sources_;
  absl::flat_hash_map<NodeId, Cursor> sent_;
  ThreadChecker thread_;
};

}  // namespace lumen::head
