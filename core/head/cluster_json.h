// RenderClusterJson: the dashboard's GET /api/cluster body, built with
// Boost.JSON from the head's node table and placement groups and what the
// nodes answered (NodeStateGatherer): nodes with resources used/total and
// store use, GPU use where NVML samples it; running and queued tasks; actors with their state; placement
// groups; pending and infeasible demand in words (the same words as
// `lumen status`); recent failures with their messages, newest first.
//
//   ClusterSnapshot snapshot{.nodes = list.asReader(), .groups = groups.asReader(),
//                            .answers = std::move(answers), .now_us = NowMicros()};
//   std::string body = RenderClusterJson(snapshot);
//
// The shape (every id shortened to 12 hex digits, as `lumen status` shows
// them; times in ms since the epoch):
//   {"time_ms", "summary": {nodes_alive, nodes_dead, tasks_running, tasks_queued,
//     tasks_finished, tasks_failed, actors, actors_alive, placement_groups, failures},
//    "nodes": [{id, host, address, pid, alive, answered, error,
//               resources: [{name, used, total, text}],
//               store: {used, capacity, objects, text},
//               gpus: [{index, name, utilization (0..1, or null), memory_used,
//                       memory_total, memory_text}]  (empty without NVML),
//               workers, idle_workers, active_leases, queued_leases}],
//    "tasks": {"running": [{id, name, state, node, owner, owner_node}], "queued": [...],
//              "running_total", "queued_total"},
//    "actors": [{id, class, name, state, node, pid, restarts, owner}], "actors_total",
//    "placement_groups": [{id, name, strategy, state, bundles, nodes, error}],
//    "pending": [{node, count, text}], "infeasible": [{node, name, count, resources, text}],
//    "failures": [{time_ms, node, kind, task_id, name, message, pid}]}
// Lists of tasks and actors hold at most kMaxListed entries (the *_total
// fields count them all); failures at most kMaxFailures.
//
// Pure and thread-safe.
#pragma once

#include <capnp/list.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/head/node_state_gatherer.h"
#include "lumen/proto/lumen.capnp.h"

namespace lumen::head {

struct ClusterSnapshot {
  capnp::List<proto::NodeStats>::Reader nodes;             // the head's node table
  capnp::List<proto::PlacementGroupState>::Reader groups;  // every group the head knows
  std::vector<NodeAnswer> answers;                         // from the live nodes
  int64_t now_us = 0;                                      // system clock
};

inline constexpr size_t kMaxListed = 200;
inline constexpr size_t kMaxFailures = 50;

std::string RenderClusterJson(const ClusterSnapshot& snapshot);

}  // namespace lumen::head
