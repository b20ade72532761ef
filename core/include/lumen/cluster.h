// The cluster as the scheduler sees it, and where the caller runs.
//
//   for (const lumen::NodeInfo& node : lumen::Nodes()) {
//     std::cout << node.id << (node.alive ? " alive " : " dead ") << node.resources["CPU"];
//   }
//   double cpus = lumen::ClusterResources()["CPU"];
//
// Thread-safe; each call asks the head (one loopback round trip). Throws
// lumen::Error before Init or when the head cannot be reached.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace lumen {

struct NodeInfo {
  std::string id;       // hex
  std::string address;  // the node daemon's address ("host:port;/unix/path")
  bool alive = false;
  std::map<std::string, double> resources;  // totals
};

// Totals over the alive nodes.
std::map<std::string, double> ClusterResources();
// What is free right now over the alive nodes (as of their last report).
std::map<std::string, double> AvailableResources();
std::vector<NodeInfo> Nodes();
// The id (hex) of the node this process runs on.
std::string GetNodeId();
// Inside a task or actor that asked for GPUs: their device ids (also what its
// CUDA_VISIBLE_DEVICES says). Empty elsewhere.
std::vector<int> GetGpuIds();

}  // namespace lumen
