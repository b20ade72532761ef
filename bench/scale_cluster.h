// A local cluster the scale benchmark starts for itself: a head and `nodes`
// node daemons on loopback, so that it knows every daemon's pid (to read its
// memory and CPU) and can join a driver to it with Init({.address = head}).
//
//   auto cluster = BenchCluster::Start({.nodes = 3, .resources = {{"CPU", 2}}});
//   Init(Config{.address = cluster->head_address()});
//   ... PeakRssKiB(cluster->node_pids()[0]) ...
//   Shutdown();
//   cluster->Stop();   // also in the destructor
//
// Not thread-safe: used by the benchmark's main thread only.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/runtime/cluster.h"

namespace lumen::bench {

struct BenchClusterSpec {
  int nodes = 1;
  std::map<std::string, double> resources;  // of each node; CPU detected when absent
  uint64_t object_store_bytes = 256ull << 20;
  std::chrono::milliseconds join_timeout{60000};  // for every node to register
};

class BenchCluster {
 public:
  // Starts the head and the nodes and waits until the head lists them all.
  static absl::StatusOr<std::unique_ptr<BenchCluster>> Start(const BenchClusterSpec& spec);
  ~BenchCluster() { Stop(); }
  BenchCluster(const BenchCluster&) = delete;
  BenchCluster& operator=(const BenchCluster&) = delete;

  const std::string& head_address() const { return head_address_; }
  pid_t head_pid() const { return head_pid_; }
  const std::vector<pid_t>& node_pids() const { return node_pids_; }
  // Stops the node daemons (last started first), then the head.
  void Stop();

 private:
  BenchCluster() = default;
  std::vector<runtime::ClusterProcesses> parts_;
  std::string head_address_;
  pid_t head_pid_ = 0;
  std::vector<pid_t> node_pids_;
};

// Starts a BenchCluster and connects this process to it as a driver
// (lumen::Init); throws CheckFailure (bench/check.h) when it cannot start.
std::unique_ptr<BenchCluster> StartAndConnect(const BenchClusterSpec& spec);

// Polls the head until `count` nodes are registered; a Check failure (throws)
// after `timeout`.
void WaitForNodes(const std::string& head, size_t count, std::chrono::milliseconds timeout);

}  // namespace lumen::bench
