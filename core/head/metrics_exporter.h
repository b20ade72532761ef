// RenderMetrics: the head's GET /metrics page (Prometheus text format) from
// the nodes' last reports: per node resources total and used, object store
// bytes and objects, workers and leases by state, infeasible requests, pulled
// bytes, each GPU's utilisation and memory (nodes that sample NVML; no GPU
// family otherwise); cluster-wide tasks by state and the task latency histogram (from the
// task events the nodes received, doc/observability.md); object store bytes
// pinned and spilled (the nodes' store summaries); and, when given, actors by
// state as their owners listed them (the head keeps no actor table).
//
//   capnp::MallocMessageBuilder message;
//   auto list = message.initRoot<proto::ClusterView>().initNodes(nodes.size());
//   nodes.FillNodes(list);
//   std::string page = RenderMetrics(list.asReader(), &actor_states);
//
// Pure and thread-safe.
#pragma once

#include <capnp/message.h>

#include <cstdint>
#include <map>
#include <string>

#include "lumen/proto/lumen.capnp.h"

namespace lumen::head {

// Actors by state ("ALIVE", "RESTARTING", ...) as their owners list them.
using ActorStateCounts = std::map<std::string, uint64_t>;

// lumen_task_latency_seconds's buckets are lumen::kTaskLatencyBuckets.
// `actor_states`: the lumen_actors family (every state of the actor lifecycle, 0
// where none); null leaves it out.
std::string RenderMetrics(capnp::List<proto::NodeStats>::Reader nodes,
                          const ActorStateCounts* actor_states = nullptr);

}  // namespace lumen::head
