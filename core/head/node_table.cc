#include "core/head/node_table.h"

#include <capnp/message.h>
#include <capnp/serialize.h>

#include "lumen/common/connection.h"
#include "lumen/common/logging.h"
#include "lumen/common/proto_util.h"

namespace lumen::head {

NodeTable::ReportOutcome NodeTable::Report(uint64_t conn_id, proto::NodeStats::Reader stats,
                                           Clock::time_point now) {
  thread_.Check("NodeTable");
  NodeId id = IdFrom<NodeId>(stats.getNodeId());
  if (dead_.contains(id)) return ReportOutcome::kRefused;
  Node& node = nodes_[id];
  bool joined = node.conn_id == 0;
  if (joined) {
    LUMEN_LOG(INFO) << "node " << id.Hex().substr(0, 12) << " joined ("
                    << stats.getAddress().cStr() << ")";
  }
  node.conn_id = conn_id;
  node.alive = true;
  node.last_report = now;
  node.total = ReadResources(stats.getTotal());
  node.available = ReadResources(stats.getAvailable());
  node.drivers.clear();
  for (auto d : stats.getDrivers()) node.drivers.push_back(IdFrom<JobId>(d));
  capnp::MallocMessageBuilder copy;
  copy.setRoot(stats);
  node.stats_frame.clear();
  AppendFrame(copy, &node.stats_frame);
  return joined ? ReportOutcome::kJoined : ReportOutcome::kUpdated;
}

std::vector<NodeTable::DeadNode> NodeTable::ExpireSilent(Clock::time_point now) {
  thread_.Check("NodeTable");
  std::vector<DeadNode> dead;
  for (auto& [id, node] : nodes_) {
    if (!node.alive || now - node.last_report <= silence_limit()) continue;
    LUMEN_LOG(WARNING) << "node " << id.Hex().substr(0, 12) << " is dead (no report for "
                       << options_.failure_threshold << " health check periods of "
                       << options_.health_check_period.count() << " ms)";
    dead.push_back(MarkDead(id, node));
  }
  return dead;
}

std::vector<NodeTable::DeadNode> NodeTable::DropConnection(uint64_t conn_id) {
  thread_.Check("NodeTable");
  std::vector<DeadNode> dead;
  for (auto& [id, node] : nodes_) {
    if (node.conn_id != conn_id || !node.alive) continue;
    LUMEN_LOG(WARNING) << "node " << id.Hex().substr(0, 12) << " is dead (connection lost)";
    dead.push_back(MarkDead(id, node));
  }
  return dead;
}

std::vector<NodeTable::DeadNode> NodeTable::Leave(const NodeId& id, uint64_t conn_id) {
  thread_.Check("NodeTable");
  auto it = nodes_.find(id);
  if (it == nodes_.end() || !it->second.alive || it->second.conn_id != conn_id) return {};
  LUMEN_LOG(INFO) << "node " << id.Hex().substr(0, 12) << " left";
  return {MarkDead(id, it->second)};
}

const NodeTable::Node* NodeTable::Find(const NodeId& id) const {
  thread_.Check("NodeTable");
  auto it = nodes_.find(id);
  return it == nodes_.end() ? nullptr : &it->second;
}

void NodeTable::FillNodes(capnp::List<proto::NodeStats>::Builder list) const {
  thread_.Check("NodeTable");
  size_t i = 0;
  for (const auto& [id, node] : nodes_) {
    if (i >= list.size()) break;
    const auto* words =
        reinterpret_cast<const capnp::word*>(node.stats_frame.data() + kFrameHeaderBytes);
    size_t n = (node.stats_frame.size() - kFrameHeaderBytes) / sizeof(capnp::word);
    capnp::FlatArrayMessageReader reader(kj::arrayPtr(words, n));
    list.setWithCaveats(i, reader.getRoot<proto::NodeStats>());
    list[i].setAlive(node.alive);
    ++i;
  }
}

scheduler::ClusterResourceView NodeTable::ResourceView() const {
  thread_.Check("NodeTable");
  scheduler::ClusterResourceView view;
  for (const auto& [id, node] : nodes_) {
    auto total = scheduler::ResourceSet::FromMap(node.total);
    auto available = scheduler::ResourceSet::FromMap(node.available);
    if (!total.ok() || !available.ok()) continue;
    view.Upsert(std::string(id.Binary()), scheduler::NodeResources{*total, *available, node.alive});
  }
  return view;
}

NodeTable::DeadNode NodeTable::MarkDead(const NodeId& id, Node& node) {
  node.alive = false;
  dead_.insert(id);
  return DeadNode{id, node.conn_id, node.drivers};
}

}  // namespace lumen::head
