#include "bench/multi_node_metrics.h"

#include <chrono>
#include <string>
#include <vector>

#include "bench/check.h"
#include "bench/remote_calls.h"
#include "bench/scale_cluster.h"
#include "bench/timeit.h"
#include "core/runtime/cluster.h"
#include "lumen/lumen.h"
#include "lumen/objectstore/transfer.h"

namespace lumen::bench {
namespace {

// A `bytes`-long array made where it runs (for the cross-node transfer).
std::vector<uint8_t> MakeBytes(uint64_t bytes) { return std::vector<uint8_t>(bytes, 1); }

}  // namespace
}  // namespace lumen::bench

LUMEN_REMOTE(lumen::bench::MakeBytes);

namespace lumen::bench {
namespace {

constexpr int kNodes = 3;

void SpreadTasks(Reporter& out, bool quick) {
  const int n = Batch(10000, quick);
  out.Rate("multi_node_tasks_async", "tasks/s", n, [&] {
    std::vector<ObjectRef<int>> refs;
    refs.reserve(n);
    for (int i = 0; i < n; ++i) {
      refs.push_back(Task(SmallValue).SetSchedulingStrategy(Spread()).Remote());
    }
    int ok = CountEqual(Get(refs), 1);
    Check(ok == n, std::to_string(n - ok) + " tasks returned wrong");
  });
}

// Cross-node transfer: an array made on another node, read here (the read
// pulls it into this node's store, then maps it). One measurement over
// `rounds` transfers; the loopback bound measured in turn with them, as this
// machine is noisy.
void CrossNode(Reporter& out, bool quick, uint64_t object_bytes) {
  std::string other;
  double loopback_bytes_per_second = 0;
  out.Value("cross_node_object_gigabytes", "GB/s", [&] {
    for (const auto& node : Nodes()) {
      if (node.id != GetNodeId()) other = node.id;
    }
    Check(!other.empty(), "no other node to transfer from");
    const int rounds = quick ? 2 : 6;
    double seconds = 0;
    for (int i = 0; i < rounds; ++i) {
      loopback_bytes_per_second +=
          objectstore::MeasureLoopbackTcpBytesPerSecond(object_bytes) / rounds;
      auto ref = Task(MakeBytes).SetSchedulingStrategy(NodeAffinity(other)).Remote(object_bytes);
      Wait(std::vector{ref}, 1);
      auto t0 = std::chrono::steady_clock::now();
      auto view = GetArray(ref);
      seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      Check(view.size() == object_bytes && view[0] == 1 && view[object_bytes - 1] == 1,
            "the cross-node object arrived damaged");
    }
    return rounds * static_cast<double>(object_bytes) / seconds / 1e9;
  });
  if (loopback_bytes_per_second > 0) {
    out.Value("loopback_tcp_gigabytes", "GB/s", [&] { return loopback_bytes_per_second / 1e9; });
  }
}

}  // namespace

void RunMultiNodeMetrics(Reporter& out, bool quick, std::chrono::milliseconds wait_timeout) {
  const uint64_t object_bytes = (quick ? 64ull : 256ull) << 20;
  std::vector<runtime::ClusterProcesses> clusters;
  std::string head;
  if (!out.Wants("multi_node_tasks_async") && !out.Wants("cross_node_object_gigabytes") &&
      !out.Wants("loopback_tcp_gigabytes")) {
    return;
  }
  bool started = out.Setup("multi_node_tasks_async", [&] {
    for (int i = 0; i < kNodes; ++i) {
      runtime::ClusterSpec spec;
      spec.start_head = head.empty();
      spec.head_address = head;
      spec.resources = {{"CPU", 2}};
      spec.object_store_bytes = 3 * object_bytes;
      auto cluster = runtime::StartCluster(spec);
      Check(cluster.ok(), "cannot start the 3-node cluster: " +
                              std::string(cluster.ok() ? "" : cluster.status().message()));
      head = cluster->head_address;
      clusters.push_back(std::move(*cluster));
    }
    // Joining nodes register asynchronously: attach once all are listed.
    WaitForNodes(head, kNodes, wait_timeout);
    Config config;
    config.address = head;
    Init(config);
  });
  if (started) {
    SpreadTasks(out, quick);
    CrossNode(out, quick, object_bytes);
    Shutdown();
  }
  for (auto it = clusters.rbegin(); it != clusters.rend(); ++it) runtime::StopCluster(*it);
}

}  // namespace lumen::bench
