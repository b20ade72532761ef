// ClusterViewPublisher: builds and sends the cluster view each node gets after
// its reports and whenever the cluster changes: every node's last report (with
// the head's verdict on whether it lives), every committed bundle (nodes route
// leases by them), and, since that node's previous view, the jobs that ended
// and the placement groups that were removed.
//
// Everything is sent as changes since that node's previous view, so a round
// of views costs O(changes), not O(nodes) per node (O(nodes²) in all): the
// publisher remembers, per node, the NodeTable version it has seen (a view
// carries only the nodes changed since: joined, died, or with new resources
// or addresses; nodes upsert them), how far into each ChangeLog it has sent
// (ended jobs, removed groups), and the placement groups' version it has
// seen: while that stays, the view says `bundlesUnchanged` instead of listing
// the committed bundles again (when it changes, all of them are listed and
// the node replaces its table; they are bounded by the live placement groups,
// HeadLimits). A node that joins gets every node, every change still retained
// and every bundle.
//
//   ClusterViewPublisher views({.nodes = &nodes, .jobs = &jobs, .groups = &pgs.manager(),
//                               .removed_groups = &pgs.removed(), .send = send_on_connection});
//   views.SendTo(node_id);   // after its report
//   views.Broadcast();       // a node joined or died, a group was created or removed
//   views.Forget(node_id);   // it died, or registered again on a new connection
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
    // Told to every node in each view: the head's tables survive its restart.
    bool head_persistent = false;
  };

  explicit ClusterViewPublisher(Sources sources) : sources_(std::move(sources)) {}

  // Sends `node` its view, if it is alive and its connection is open.
  void SendTo(const NodeId& node);
  void set_head_persistent(bool persistent) { sources_.head_persistent = persistent; }
  // Sends every alive node its view.
  void Broadcast();
  // Forgets what was sent to `node`: it died, or it registered again on a new
  // connection (what went out on the old one may be lost: its next view is
  // the whole view).
  void Forget(const NodeId& node) { sent_.erase(node); }

  // How far a node's views went into each source.
  struct Cursor {
    uint64_t nodes_seen = 0;     // NodeTable::version()
    uint64_t jobs_seen = 0;      // JobTable::ended().last_seq()
    uint64_t removals_seen = 0;  // the removed groups' last_seq()
    uint64_t groups_seen = 0;    // PlacementGroupManager::version()
    bool sent_bundles = false;   // a view with the bundle list was sent
  };

  // Fills `view` with what a node that has seen `seen` lacks, and returns the
  // cursor it will have seen once the view is sent. O(changes since `seen`),
  // plus O(committed bundles) when the groups changed.
  Cursor Fill(proto::ClusterView::Builder view, const Cursor& seen) const;

 private:
  Sources sources_;
  absl::flat_hash_map<NodeId, Cursor> sent_;
  ThreadChecker thread_;
};

}  // namespace lumen::head
