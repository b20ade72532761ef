#include "core/head/cluster_view_publisher.h"

#include "core/head/head_replies.h"
#include "lumen/common/connection.h"
#include "lumen/common/proto_util.h"

namespace lumen::head {

void ClusterViewPublisher::SendTo(const NodeId& node) {
  thread_.Check("ClusterViewPublisher");
  const NodeTable::Node* entry = sources_.nodes->Find(node);
  if (entry == nullptr || !entry->alive) return;
  Cursor& cursor = sent_[node];
  OutMessage out;
  auto view = out.Init().initClusterView();
  Cursor next = Fill(view, cursor);
  view.setHeadPersistent(sources_.head_persistent);
  if (!sources_.send(entry->conn_id, out.builder())) return;
  cursor = next;
}

void ClusterViewPublisher::Broadcast() {
  thread_.Check("ClusterViewPublisher");
  for (const auto& [id, node] : sources_.nodes->nodes()) {
    if (node.alive) SendTo(id);
  }
}

ClusterViewPublisher::Cursor ClusterViewPublisher::Fill(proto::ClusterView::Builder view,
                                                        const Cursor& seen) const {
  Cursor next{.nodes_seen = sources_.nodes->version(),
              .jobs_seen = sources_.jobs->ended().last_seq(),
              .removals_seen = sources_.removed_groups->last_seq(),
              .groups_seen = sources_.groups->version(),
              .sent_bundles = true};
  const NodeTable& nodes = *sources_.nodes;
  nodes.FillChangedSince(seen.nodes_seen,
                         view.initNodes(nodes.CountChangedSince(seen.nodes_seen)));
  const uint64_t jobs_seen = seen.jobs_seen;
  const uint64_t removals_seen = seen.removals_seen;

  const ChangeLog<JobId>& ended = sources_.jobs->ended();
  auto jobs = view.initEndedJobs(ended.CountSince(jobs_seen));
  size_t j = 0;
  ended.ForEachSince(jobs_seen, [&](const JobId& job) { jobs.set(j++, DataOf(job)); });

  const ChangeLog<std::string>& removed = *sources_.removed_groups;
  auto removed_list = view.initRemovedGroups(removed.CountSince(removals_seen));
  size_t r = 0;
  removed.ForEachSince(removals_seen,
                       [&](const std::string& group) { removed_list.set(r++, BytesOf(group)); });

  if (seen.sent_bundles && seen.groups_seen == next.groups_seen) {
    view.setBundlesUnchanged(true);
    return next;
  }
  auto blist = view.initBundles(sources_.groups->created_bundles());
  size_t b = 0;
  for (const auto& [gid, group] : sources_.groups->created()) {
    const scheduler::PlacementGroup& g = *group;
    for (size_t k = 0; k < g.bundles.size(); ++k, ++b) {
      blist[b].setGroupId(BytesOf(gid));
      blist[b].setIndex(static_cast<int32_t>(k));
      blist[b].setNodeId(BytesOf(g.nodes[k]));
      SetResources(blist[b].initResources(g.bundles[k].size()), g.bundles[k]);
    }
  }
  return next;
}

}  // namespace lumen::head
