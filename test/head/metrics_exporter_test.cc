// GET /metrics's page (RenderMetrics, PrometheusWriter) parsed by a strict
// parser of the exposition format; and that parser rejecting broken pages.
#include "core/head/metrics_exporter.h"

#include <capnp/message.h>
#include <catch2/catch.hpp>
#include <cmath>

#include "core/head/prometheus_writer.h"
#include "lumen/common/ids.h"
#include "lumen/common/proto_util.h"
#include "lumen/common/task_events.h"
#include "test/head/prometheus_parser.h"

namespace lumen::head {
namespace {

using test::ParsePrometheusText;
using test::PromFamily;

const PromFamily* FamilyNamed(const std::vector<PromFamily>& families, const std::string& name) {
  for (const auto& f : families)
    if (f.name == name) return &f;
  return nullptr;
}

double ValueOf(const PromFamily& f, const std::string& series,
               const std::map<std::string, std::string>& labels) {
  for (const auto& s : f.samples)
    if (s.name == series && s.labels == labels) return s.value;
  return NAN;
}

void FillNode(proto::NodeStats::Builder n, const NodeId& id, bool alive, uint64_t finished,
              uint64_t bucket0) {
  n.setNodeId(DataOf(id));
  n.setHostname("host \"a\"\\b");
  n.setAddress("127.0.0.1:1;/tmp/s");
  n.setAlive(alive);
  SetResources(n.initTotal(2), {{"CPU", 4}, {"GPU", 1}});
  SetResources(n.initAvailable(2), {{"CPU", 1.5}, {"GPU", 1}});
  n.setStoreCapacity(1 << 30);
  n.setStoreUsed(1 << 20);
  n.setStoreObjects(7);
  n.setWorkers(5);
  n.setIdleWorkers(2);
  n.setActiveLeases(3);
  n.setQueuedLeases(1);
  auto d = n.initInfeasible(1);
  d[0].setCount(3);
  d[0].setName("Train");
  auto totals = n.initTaskTotals();
  auto kinds = totals.initEventsByKind(kNumTaskEventKinds);
  kinds.set(static_cast<int>(TaskEventKind::kSubmitted), finished + 4);
  kinds.set(static_cast<int>(TaskEventKind::kStarted), finished + 2);
  kinds.set(static_cast<int>(TaskEventKind::kResultStored), finished);
  kinds.set(static_cast<int>(TaskEventKind::kFinished), finished - 1);
  kinds.set(static_cast<int>(TaskEventKind::kFailed), 1);
  auto buckets = totals.initLatencyBuckets(kTaskLatencyBuckets.size() + 1);
  buckets.set(0, bucket0);
  buckets.set(kTaskLatencyBuckets.size(), 1);
  totals.setLatencySumSeconds(100.5);
  totals.setPulledBytes(12345);
  auto store = n.initStoreSummary();
  store.setPinnedBytes(4096);
  store.setSpilledBytes(3 << 20);
  store.setSpilledTotalBytes(5 << 20);
  store.setRestoredBytes(2 << 20);
}

// Invariant: the page parses under the format's rules, and each number is the
// nodes' report (summed over nodes where it is cluster-wide).
TEST_CASE("GET /metrics renders the nodes' reports in the Prometheus text format") {
  capnp::MallocMessageBuilder message;
  auto nodes = message.initRoot<proto::ClusterView>().initNodes(2);
  NodeId a = NodeId::Random(), b = NodeId::Random();
  FillNode(nodes[0], a, true, 10, 5);
  FillNode(nodes[1], b, false, 20, 6);
  const ActorStateCounts actor_states{{"ALIVE", 3}, {"RESTARTING", 1}};
  std::string page = RenderMetrics(nodes.asReader(), &actor_states);
  INFO(page);
  auto parsed = ParsePrometheusText(page);
  REQUIRE(parsed.ok());
  std::string na = a.Hex().substr(0, 12), nb = b.Hex().substr(0, 12);

  const PromFamily* info = FamilyNamed(*parsed, "lumen_node_info");
  REQUIRE(info != nullptr);
  CHECK(ValueOf(*info, "lumen_node_info",
                {{"node", na}, {"host", "host \"a\"\\b"}, {"address", "127.0.0.1:1;/tmp/s"}}) == 1);
  CHECK(ValueOf(*FamilyNamed(*parsed, "lumen_node_alive"), "lumen_node_alive", {{"node", nb}}) == 0);
  const PromFamily* used = FamilyNamed(*parsed, "lumen_node_resource_used");
  REQUIRE(used != nullptr);
  CHECK(ValueOf(*used, "lumen_node_resource_used", {{"node", na}, {"resource", "CPU"}}) == 2.5);
  CHECK(ValueOf(*used, "lumen_node_resource_used", {{"node", na}, {"resource", "GPU"}}) == 0);
  CHECK(ValueOf(*FamilyNamed(*parsed, "lumen_node_resource_total"), "lumen_node_resource_total",
                {{"node", nb}, {"resource", "CPU"}}) == 4);
  CHECK(ValueOf(*FamilyNamed(*parsed, "lumen_object_store_used_bytes"),
                "lumen_object_store_used_bytes", {{"node", na}}) == (1 << 20));
  CHECK(ValueOf(*FamilyNamed(*parsed, "lumen_object_store_objects"), "lumen_object_store_objects",
                {{"node", na}}) == 7);
  const PromFamily* workers = FamilyNamed(*parsed, "lumen_workers");
  REQUIRE(workers != nullptr);
  CHECK(ValueOf(*workers, "lumen_workers", {{"node", na}, {"state", "busy"}}) == 3);
  CHECK(ValueOf(*workers, "lumen_workers", {{"node", na}, {"state", "idle"}}) == 2);
  CHECK(ValueOf(*FamilyNamed(*parsed, "lumen_leases"), "lumen_leases",
                {{"node", na}, {"state", "queued"}}) == 1);
  CHECK(ValueOf(*FamilyNamed(*parsed, "lumen_infeasible_lease_requests"),
                "lumen_infeasible_lease_requests", {{"node", na}}) == 3);

  // Tasks: submitted 14+24, started 12+22, stored 10+20, finished 9+19, failed 2.
  const PromFamily* tasks = FamilyNamed(*parsed, "lumen_tasks");
  REQUIRE(tasks != nullptr);
  CHECK(ValueOf(*tasks, "lumen_tasks", {{"state", "RUNNING"}}) == 4);
  CHECK(ValueOf(*tasks, "lumen_tasks", {{"state", "FINISHED"}}) == 28);
  CHECK(ValueOf(*tasks, "lumen_tasks", {{"state", "FAILED"}}) == 2);
  CHECK(ValueOf(*tasks, "lumen_tasks", {{"state", "PENDING"}}) == 38 - 30 - 4);

  const PromFamily* latency = FamilyNamed(*parsed, "lumen_task_latency_seconds");
  REQUIRE(latency != nullptr);
  CHECK(latency->type == "histogram");
  CHECK(ValueOf(*latency, "lumen_task_latency_seconds_bucket", {{"le", "0.001"}}) == 11);
  CHECK(ValueOf(*latency, "lumen_task_latency_seconds_bucket", {{"le", "60"}}) == 11);
  CHECK(ValueOf(*latency, "lumen_task_latency_seconds_bucket", {{"le", "+Inf"}}) == 13);
  CHECK(ValueOf(*latency, "lumen_task_latency_seconds_count", {}) == 13);
  CHECK(ValueOf(*latency, "lumen_task_latency_seconds_sum", {}) == 201);
  CHECK(ValueOf(*FamilyNamed(*parsed, "lumen_transfer_pulled_bytes_total"),
                "lumen_transfer_pulled_bytes_total", {{"node", nb}}) == 12345);
  CHECK(FamilyNamed(*parsed, "lumen_transfer_pulled_bytes_total")->type == "counter");

  // The store's pins and spilling, per node.
  CHECK(ValueOf(*FamilyNamed(*parsed, "lumen_object_store_pinned_bytes"),
                "lumen_object_store_pinned_bytes", {{"node", na}}) == 4096);
  CHECK(ValueOf(*FamilyNamed(*parsed, "lumen_object_store_spilled_bytes"),
                "lumen_object_store_spilled_bytes", {{"node", nb}}) == (3 << 20));
  CHECK(ValueOf(*FamilyNamed(*parsed, "lumen_object_store_spilled_bytes_total"),
                "lumen_object_store_spilled_bytes_total", {{"node", na}}) == (5 << 20));
  CHECK(ValueOf(*FamilyNamed(*parsed, "lumen_object_store_restored_bytes_total"),
                "lumen_object_store_restored_bytes_total", {{"node", na}}) == (2 << 20));
  // Actors by state: every lifecycle state, 0 where none.
  const PromFamily* actors = FamilyNamed(*parsed, "lumen_actors");
  REQUIRE(actors != nullptr);
  CHECK(ValueOf(*actors, "lumen_actors", {{"state", "ALIVE"}}) == 3);
  CHECK(ValueOf(*actors, "lumen_actors", {{"state", "RESTARTING"}}) == 1);
  CHECK(ValueOf(*actors, "lumen_actors", {{"state", "PENDING_CREATION"}}) == 0);
  CHECK(ValueOf(*actors, "lumen_actors", {{"state", "DEAD"}}) == 0);
  // Without the owners' lists there is no actor family.
  auto without = ParsePrometheusText(RenderMetrics(nodes.asReader()));
  REQUIRE(without.ok());
  CHECK(FamilyNamed(*without, "lumen_actors") == nullptr);
}

// Invariant: the GPU families appear only when a node reports GPUs, with one
// sample per device of such a node (utilisation only where NVML knows it),
// and the page still parses.
TEST_CASE("GET /metrics shows GPU utilisation and memory per device, only when present") {
  capnp::MallocMessageBuilder message;
  auto nodes = message.initRoot<proto::ClusterView>().initNodes(2);
  NodeId a = NodeId::Random(), b = NodeId::Random();
  FillNode(nodes[0], a, true, 10, 5);
  FillNode(nodes[1], b, true, 10, 5);
  {
    std::string page = RenderMetrics(nodes.asReader());
    auto parsed = ParsePrometheusText(page);
    REQUIRE(parsed.ok());
    for (const auto& f : *parsed) CHECK(f.name.rfind("lumen_node_gpu", 0) != 0);
  }
  auto gpus = nodes[1].initGpus(2);
  gpus[0].setIndex(0);
  gpus[0].setName("NVIDIA H100");
  gpus[0].setUuid("GPU-0");
  gpus[0].setUtilizationKnown(true);
  gpus[0].setUtilization(0.25);
  gpus[0].setMemoryUsedBytes(1000);
  gpus[0].setMemoryTotalBytes(8000);
  gpus[1].setIndex(1);
  gpus[1].setName("NVIDIA H100 MIG");
  gpus[1].setUuid("GPU-1");
  gpus[1].setUtilizationKnown(false);
  gpus[1].setMemoryUsedBytes(0);
  gpus[1].setMemoryTotalBytes(4000);
  std::string page = RenderMetrics(nodes.asReader());
  INFO(page);
  auto parsed = ParsePrometheusText(page);
  REQUIRE(parsed.ok());
  std::string nb = b.Hex().substr(0, 12);
  const PromFamily* util = FamilyNamed(*parsed, "lumen_node_gpu_utilization_ratio");
  REQUIRE(util != nullptr);
  CHECK(util->type == "gauge");
  REQUIRE(util->samples.size() == 1);
  CHECK(ValueOf(*util, "lumen_node_gpu_utilization_ratio", {{"node", nb}, {"gpu", "0"}}) == 0.25);
  const PromFamily* used = FamilyNamed(*parsed, "lumen_node_gpu_memory_used_bytes");
  REQUIRE(used != nullptr);
  CHECK(used->samples.size() == 2);
  CHECK(ValueOf(*used, "lumen_node_gpu_memory_used_bytes", {{"node", nb}, {"gpu", "0"}}) == 1000);
  CHECK(ValueOf(*FamilyNamed(*parsed, "lumen_node_gpu_memory_total_bytes"),
                "lumen_node_gpu_memory_total_bytes", {{"node", nb}, {"gpu", "1"}}) == 4000);
  CHECK(ValueOf(*FamilyNamed(*parsed, "lumen_node_gpu_info"), "lumen_node_gpu_info",
                {{"node", nb}, {"gpu", "1"}, {"name", "NVIDIA H100 MIG"}, {"uuid", "GPU-1"}}) == 1);
}

TEST_CASE("the writer escapes label values and help text and formats special values") {
  PrometheusWriter out;
  out.Family("x", "gauge", "line one\nback\\slash");
  out.Sample("x", {{"v", "a\"b\nc\\d"}}, 0.1);
  out.Sample("x", {{"v", "inf"}}, INFINITY);
  out.Sample("x", {{"v", "nan"}}, NAN);
  std::string page = out.Take();
  CHECK(page ==
        "# HELP x line one\\nback\\\\slash\n# TYPE x gauge\n"
        "x{v=\"a\\\"b\\nc\\\\d\"} 0.1\nx{v=\"inf\"} +Inf\nx{v=\"nan\"} NaN\n");
  auto parsed = ParsePrometheusText(page);
  REQUIRE(parsed.ok());
  CHECK(parsed->at(0).samples.at(0).labels.at("v") == "a\"b\nc\\d");
}

// Invariant: the parser is strict: each page below breaks one rule and fails.
TEST_CASE("the strict exposition parser rejects pages that break the format") {
  CHECK(ParsePrometheusText("# TYPE a gauge\na 1\n").ok());
  for (const char* bad : {
           "a 1",                                        // no final newline
           "1a 1\n",                                     // bad name
           "a{1b=\"x\"} 1\n",                            // bad label name
           "a{b=\"x\\t\"} 1\n",                          // bad escape
           "a{b=\"x\"} one\n",                           // bad value
           "a 1\n# TYPE a gauge\n",                      // TYPE after samples
           "# TYPE a gauge\na 1\n# TYPE b gauge\nb 1\na 2\n",  // family split
           "a{b=\"x\"} 1\na{b=\"x\"} 2\n",               // duplicate series
           "# TYPE a counter\na -1\n",                   // negative counter
           "# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_sum 1\nh_count 2\n",  // no +Inf
           "# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\nh_sum 1\nh_count 1\n",
       }) {
    INFO(bad);
    CHECK_FALSE(ParsePrometheusText(bad).ok());
  }
}

}  // namespace
}  // namespace lumen::head
