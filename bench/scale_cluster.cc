#include "bench/scale_cluster.h"

#include <unistd.h>

#include <thread>

#include "bench/check.h"
#include "lumen/common/head_client.h"
#include "lumen/lumen.h"

namespace lumen::bench {

void WaitForNodes(const std::string& head, size_t count, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    auto nodes = runtime::QueryNodes(head);
    if (nodes.ok() && nodes->size() == count) return;
    Check(std::chrono::steady_clock::now() < deadline,
          "the benchmark cluster's " + std::to_string(count) + " nodes did not register within " +
              std::to_string(timeout.count()) + " ms");
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

absl::StatusOr<std::unique_ptr<BenchCluster>> BenchCluster::Start(const BenchClusterSpec& spec) {
  std::unique_ptr<BenchCluster> cluster(new BenchCluster());
  runtime::ClusterSpec head;
  head.start_node = false;
  auto started = runtime::StartCluster(head);
  if (!started.ok()) return started.status();
  cluster->head_address_ = started->head_address;
  cluster->head_pid_ = started->pids.at(0);
  cluster->parts_.push_back(std::move(*started));
  for (int i = 0; i < spec.nodes; ++i) {
    runtime::ClusterSpec node;
    node.start_head = false;
    node.head_address = cluster->head_address_;
    node.resources = spec.resources;
    node.object_store_bytes = spec.object_store_bytes;
    auto joined = runtime::StartCluster(node);
    if (!joined.ok()) return joined.status();  // the destructor stops what started
    cluster->node_pids_.push_back(joined->pids.at(0));
    cluster->parts_.push_back(std::move(*joined));
  }
  WaitForNodes(cluster->head_address_, static_cast<size_t>(spec.nodes), spec.join_timeout);
  return cluster;
}

void BenchCluster::Stop() {
  // The node daemons are told at once (their parent pipes close) and reaped,
  // then the head, so that no daemon sees its head go first.
  for (size_t i = 1; i < parts_.size(); ++i) {
    if (parts_[i].parent_pipe >= 0) ::close(parts_[i].parent_pipe);
    parts_[i].parent_pipe = -1;
  }
  for (auto it = parts_.rbegin(); it != parts_.rend(); ++it) runtime::StopCluster(*it);
  parts_.clear();
  node_pids_.clear();
  head_pid_ = 0;
}

std::unique_ptr<BenchCluster> StartAndConnect(const BenchClusterSpec& spec) {
  auto started = BenchCluster::Start(spec);
  Check(started.ok(), "cannot start the cluster: " +
                          std::string(started.ok() ? "" : started.status().message()));
  Config config;
  config.address = (*started)->head_address();
  Init(config);
  return std::move(*started);
}

}  // namespace lumen::bench
