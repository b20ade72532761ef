// RenderMetrics: the head's GET /metrics page (Prometheus text format) from
// the nodes' last reports: per node resources total and used, object store
// bytes and objects, workers and leases by state, infeasible requests, pulled
// bytes, each GPU's utilisation and memory (nodes that sample NVML; no GPU
// family otherwise); cluster-wide tasks by state and the task latency histogram (from the
// task events the nodes received, doc/observability.md).
//
//   capnp::MallocMessageBuilder message;
//   auto list = message.initRoot<proto::ClusterView>().initNodes(nodes.size());
//   nodes.FillNodes(list);
//   std::string page = RenderMetrics(list.asReader());
//
// Pure and thread-safe.
#pragma once

#include <capnp/message.h>
#include <string>

#include "lumen/proto/lumen.capnp.h"

namespace lumen::head {

// lumen_task_latency_seconds's buckets are lumen::kTaskLatencyBuckets.
std::string RenderMetrics(capnp::List<proto::NodeStats>::Reader nodes);

}  // namespace lumen::head
