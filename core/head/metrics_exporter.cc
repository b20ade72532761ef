#include "core/head/metrics_exporter.h"

#include <algorithm>
#include <map>
#include <vector>

#include "core/head/prometheus_writer.h"
#include "lumen/actors/actor_lifecycle.h"
#include "lumen/common/ids.h"
#include "lumen/common/proto_util.h"
#include "lumen/common/task_events.h"

namespace lumen::head {
namespace {

using Labels = PrometheusWriter::Labels;

std::string NodeLabel(proto::NodeStats::Reader n) {
  return IdFrom<NodeId>(n.getNodeId()).Hex().substr(0, 12);
}

uint64_t KindCount(proto::TaskTotals::Reader totals, TaskEventKind kind) {
  auto list = totals.getEventsByKind();
  auto i = static_cast<unsigned>(kind);
  return i < list.size() ? list[i] : 0;
}

// One gauge or counter family with one sample per node, `value` of its report.
template <class Fn>
void PerNode(PrometheusWriter& out, capnp::List<proto::NodeStats>::Reader nodes, const char* name,
             const char* type, const char* help, Fn value) {
  out.Family(name, type, help);
  for (auto n : nodes) out.Sample(name, {{"node", NodeLabel(n)}}, static_cast<double>(value(n)));
}

// Per GPU of each node that samples them through NVML; no family at all when
// no node does (a cluster without NVIDIA GPUs shows no GPU series).
void RenderGpuMetrics(PrometheusWriter& out, capnp::List<proto::NodeStats>::Reader nodes) {
  bool any = false;
  for (auto n : nodes) any = any || n.getGpus().size() > 0;
  if (!any) return;
  auto per_gpu = [&](const char* name, const char* help, auto value, bool (*known)(proto::GpuStats::Reader)) {
    out.Family(name, "gauge", help);
    for (auto n : nodes) {
      for (auto g : n.getGpus()) {
        if (!known(g)) continue;
        out.Sample(name, {{"node", NodeLabel(n)}, {"gpu", std::to_string(g.getIndex())}},
                   static_cast<double>(value(g)));
      }
    }
  };
  out.Family("lumen_node_gpu_info", "gauge", "One per GPU of a node (NVML): its model and UUID.");
  for (auto n : nodes) {
    for (auto g : n.getGpus()) {
      out.Sample("lumen_node_gpu_info",
                 {{"node", NodeLabel(n)}, {"gpu", std::to_string(g.getIndex())},
                  {"name", g.getName().cStr()}, {"uuid", g.getUuid().cStr()}},
                 1);
    }
  }
  per_gpu("lumen_node_gpu_utilization_ratio",
          "Share of NVML's last sample period (1/6 s to 1 s) in which a kernel ran on the GPU, 0..1.",
          [](proto::GpuStats::Reader g) { return g.getUtilization(); },
          [](proto::GpuStats::Reader g) { return g.getUtilizationKnown(); });
  per_gpu("lumen_node_gpu_memory_used_bytes", "GPU memory in use (all processes).",
          [](proto::GpuStats::Reader g) { return g.getMemoryUsedBytes(); },
          [](proto::GpuStats::Reader) { return true; });
  per_gpu("lumen_node_gpu_memory_total_bytes", "GPU memory the device has.",
          [](proto::GpuStats::Reader g) { return g.getMemoryTotalBytes(); },
          [](proto::GpuStats::Reader) { return true; });
}

}  // namespace

std::string RenderMetrics(capnp::List<proto::NodeStats>::Reader nodes,
                          const ActorStateCounts* actor_states) {
  PrometheusWriter out;
  out.Family("lumen_node_info", "gauge", "One per node the head knows: its host and address.");
  for (auto n : nodes) {
    out.Sample("lumen_node_info",
               {{"node", NodeLabel(n)}, {"host", n.getHostname().cStr()},
                {"address", n.getAddress().cStr()}},
               1);
  }
  PerNode(out, nodes, "lumen_node_alive", "gauge", "1 while the node is alive, 0 once declared dead.",
          [](auto n) { return n.getAlive() ? 1 : 0; });

  out.Family("lumen_node_resource_total", "gauge", "Resources a node has (CPU, GPU, memory bytes, custom).");
  for (auto n : nodes) {
    for (const auto& [name, qty] : ReadResources(n.getTotal())) {
      out.Sample("lumen_node_resource_total", {{"node", NodeLabel(n)}, {"resource", name}}, qty);
    }
  }
  out.Family("lumen_node_resource_used", "gauge", "Resources held by leases on a node.");
  for (auto n : nodes) {
    auto available = ReadResources(n.getAvailable());
    for (const auto& [name, qty] : ReadResources(n.getTotal())) {
      double free = available.contains(name) ? available.at(name) : 0;
      out.Sample("lumen_node_resource_used", {{"node", NodeLabel(n)}, {"resource", name}},
                 std::max(0.0, qty - free));
    }
  }

  PerNode(out, nodes, "lumen_object_store_capacity_bytes", "gauge",
          "Size of a node's shared-memory object store.",
          [](auto n) { return n.getStoreCapacity(); });
  PerNode(out, nodes, "lumen_object_store_used_bytes", "gauge",
          "Bytes of a node's object store in use.", [](auto n) { return n.getStoreUsed(); });
  PerNode(out, nodes, "lumen_object_store_objects", "gauge", "Objects in a node's object store.",
          [](auto n) { return n.getStoreObjects(); });
  PerNode(out, nodes, "lumen_object_store_pinned_bytes", "gauge",
          "Bytes of a node's store held by at least one pin (a reader's view, a primary copy).",
          [](auto n) { return n.getStoreSummary().getPinnedBytes(); });
  PerNode(out, nodes, "lumen_object_store_spilled_bytes", "gauge",
          "Bytes of live objects of a node with a copy on disk now.",
          [](auto n) { return n.getStoreSummary().getSpilledBytes(); });
  PerNode(out, nodes, "lumen_object_store_spilled_bytes_total", "counter",
          "Bytes a node's store wrote to disk (spilled), since it started.",
          [](auto n) { return n.getStoreSummary().getSpilledTotalBytes(); });
  PerNode(out, nodes, "lumen_object_store_restored_bytes_total", "counter",
          "Bytes a node's store read back from disk (restored), since it started.",
          [](auto n) { return n.getStoreSummary().getRestoredBytes(); });

  if (actor_states != nullptr) {
    out.Family("lumen_actors", "gauge", "Actors by state, as their owners list them.");
    ActorStateCounts all = *actor_states;
    for (auto state : {actors::ActorState::kCreating, actors::ActorState::kAlive,
                       actors::ActorState::kRestarting, actors::ActorState::kDead}) {
      all.try_emplace(actors::ActorStateName(state), 0);
    }
    for (const auto& [state, count] : all) out.Sample("lumen_actors", {{"state", state}}, count);
  }

  out.Family("lumen_workers", "gauge", "Worker processes of a node, idle or busy (leased).");
  for (auto n : nodes) {
    uint32_t idle = std::min(n.getIdleWorkers(), n.getWorkers());
    out.Sample("lumen_workers", {{"node", NodeLabel(n)}, {"state", "idle"}}, idle);
    out.Sample("lumen_workers", {{"node", NodeLabel(n)}, {"state", "busy"}}, n.getWorkers() - idle);
  }
  out.Family("lumen_leases", "gauge",
             "Worker leases of a node: granted (active) and requests waiting (queued).");
  for (auto n : nodes) {
    out.Sample("lumen_leases", {{"node", NodeLabel(n)}, {"state", "active"}}, n.getActiveLeases());
    out.Sample("lumen_leases", {{"node", NodeLabel(n)}, {"state", "queued"}}, n.getQueuedLeases());
  }
  PerNode(out, nodes, "lumen_infeasible_lease_requests", "gauge",
          "Lease requests at a node that no node of the cluster can run yet.", [](auto n) {
            uint64_t count = 0;
            for (auto d : n.getInfeasible()) count += d.getCount();
            return count;
          });

  // Tasks by state, cluster-wide, from the events the nodes received: each
  // submission is pending until it starts, running until its result is
  // stored, then finished or failed as its owner saw it end.
  uint64_t submitted = 0, started = 0, stored = 0, finished = 0, failed = 0;
  std::vector<uint64_t> buckets(kTaskLatencyBuckets.size() + 1, 0);
  double latency_sum = 0;
  for (auto n : nodes) {
    auto t = n.getTaskTotals();
    submitted += KindCount(t, TaskEventKind::kSubmitted);
    started += KindCount(t, TaskEventKind::kStarted);
    stored += KindCount(t, TaskEventKind::kResultStored);
    finished += KindCount(t, TaskEventKind::kFinished);
    failed += KindCount(t, TaskEventKind::kFailed);
    auto b = t.getLatencyBuckets();
    for (unsigned i = 0; i < b.size() && i < buckets.size(); ++i) buckets[i] += b[i];
    latency_sum += t.getLatencySumSeconds();
  }
  uint64_t running = started > stored ? started - stored : 0;
  uint64_t ended = finished + failed;
  uint64_t pending = submitted > ended + running ? submitted - ended - running : 0;
  out.Family("lumen_tasks", "gauge",
             "Tasks and actor calls by state (PENDING: waiting for arguments, a lease or a "
             "worker; FINISHED and FAILED: since the nodes started).");
  out.Sample("lumen_tasks", {{"state", "PENDING"}}, static_cast<double>(pending));
  out.Sample("lumen_tasks", {{"state", "RUNNING"}}, static_cast<double>(running));
  out.Sample("lumen_tasks", {{"state", "FINISHED"}}, static_cast<double>(finished));
  out.Sample("lumen_tasks", {{"state", "FAILED"}}, static_cast<double>(failed));

  out.Family("lumen_task_latency_seconds", "histogram",
             "Time from a task's submission to its end, as its owner saw it.");
  out.Histogram("lumen_task_latency_seconds", {},
                std::vector<double>(kTaskLatencyBuckets.begin(), kTaskLatencyBuckets.end()),
                buckets, latency_sum);

  out.Family("lumen_task_events_total", "counter", "Task events a node received, by kind.");
  for (auto n : nodes) {
    for (int k = 0; k < kNumTaskEventKinds; ++k) {
      auto kind = static_cast<TaskEventKind>(k);
      out.Sample("lumen_task_events_total",
                 {{"node", NodeLabel(n)}, {"event", TaskEventKindName(kind)}},
                 static_cast<double>(KindCount(n.getTaskTotals(), kind)));
    }
  }
  PerNode(out, nodes, "lumen_task_events_dropped_total", "counter",
          "Task events lost to full buffers (process rings, the node's buffer).",
          [](auto n) { return n.getTaskTotals().getDroppedEvents(); });
  PerNode(out, nodes, "lumen_transfer_pulled_bytes_total", "counter",
          "Bytes of objects a node pulled from other nodes.",
          [](auto n) { return n.getTaskTotals().getPulledBytes(); });
  RenderGpuMetrics(out, nodes);
  return out.Take();
}

}  // namespace lumen::head
