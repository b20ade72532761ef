#include "core/head/node_table.h"

#include <capnp/message.h>
#include <capnp/serialize.h>

#include <algorithm>
#include <cstring>
#include <iterator>

#include "lumen/common/connection.h"
#include "lumen/common/logging.h"
#include "lumen/common/proto_util.h"

namespace lumen::head {

int NodeTable::StoreLevel(uint64_t used, uint64_t capacity) {
  if (capacity == 0) return -1;
  if (used >= capacity) return static_cast<int>(kStoreLevels);
  // used < capacity, so used * kStoreLevels / capacity < kStoreLevels; 128-bit
  // so that the product cannot overflow.
  return static_cast<int>(static_cast<unsigned __int128>(used) * kStoreLevels / capacity);
}

NodeTable::ReportOutcome NodeTable::Report(uint64_t conn_id, proto::NodeStats::Reader stats,
                                           Clock::time_point now, bool registering) {
  thread_.Check("NodeTable");
  NodeId id = IdFrom<NodeId>(stats.getNodeId());
  if (dead_.contains(id)) {
    ++stale_refused_;
    return ReportOutcome::kRefused;
  }
  // Everything read from the report first: a malformed one (a text without
  // its NUL, as head_dispatch_fuzzer sends) throws here, before the table
  // changes. (A node entry made and left without its stats frame took the
  // head down later, in FillOne on the connection's close, outside any frame
  // handler.)
  std::string address = stats.getAddress().cStr();
  std::string transfer_address = stats.getTransferAddress().cStr();
  auto total = ReadResources(stats.getTotal());
  auto available = ReadResources(stats.getAvailable());
  std::vector<JobId> drivers;
  for (auto d : stats.getDrivers()) drivers.push_back(IdFrom<JobId>(d));
  std::string stats_frame;
  {
    capnp::MallocMessageBuilder copy;
    copy.setRoot(stats);
    AppendFrame(copy, &stats_frame);
  }
  auto [it, added] = nodes_.try_emplace(id);
  Node& node = it->second;
  // A known node on another connection than the one it reports on: a
  // registration moves it there (its link was reset, or the head restarted);
  // a report is a late frame of the connection it left.
  const bool moved = !added && node.conn_id != conn_id;
  if (moved && !registering && node.conn_id != 0) return ReportOutcome::kIgnored;
  const bool rejoined = moved && conn_id != 0;
  const bool joined = added || rejoined;
  if (added && conn_id != 0) {
    LUMEN_LOG(INFO) << "node " << id.Hex().substr(0, 12) << " joined (" << address << ")";
  } else if (rejoined) {
    ++rejoined_;
    LUMEN_LOG(INFO) << "node " << id.Hex().substr(0, 12) << " registered again on a new connection ("
                    << address << ")";
  }
  node.conn_id = conn_id;
  node.alive = true;
  node.last_report = now;
  const int store_level = StoreLevel(stats.getStoreUsed(), stats.getStoreCapacity());
  bool changed = joined || total != node.total || available != node.available ||
                 node.address != address || node.transfer_address != transfer_address ||
                 store_level != node.store_level;
  node.store_level = store_level;
  node.total = std::move(total);
  node.available = std::move(available);
  node.address = std::move(address);
  node.transfer_address = std::move(transfer_address);
  node.drivers = std::move(drivers);
  node.stats_frame = std::move(stats_frame);
  if (changed) Touch(id, node);
  if (rejoined) return ReportOutcome::kRejoined;
  return joined ? ReportOutcome::kJoined : ReportOutcome::kUpdated;
}

std::vector<NodeTable::DeadNode> NodeTable::ExpireSilent(Clock::time_point now) {
  thread_.Check("NodeTable");
  std::vector<DeadNode> dead;
  for (auto& [id, node] : nodes_) {
    if (!node.alive || now - node.last_report <= silence_limit()) continue;
    LUMEN_LOG(WARNING) << "node " << id.Hex().substr(0, 12) << " is dead ("
                       << (node.conn_id == 0 ? "without a connection, not registered again, for "
                                             : "no report for ")
                       << options_.failure_threshold << " health check periods of "
                       << options_.health_check_period.count() << " ms)";
    dead.push_back(MarkDead(id, node));
  }
  return dead;
}

void NodeTable::ExcuseSilence(Clock::duration stall, Clock::time_point now) {
  thread_.Check("NodeTable");
  if (stall <= Clock::duration::zero()) return;
  for (auto& [id, node] : nodes_) {
    // (A restored node's grace, a last report in the future, is left alone.)
    if (node.alive && node.last_report < now) {
      node.last_report = std::min(node.last_report + stall, now);
    }
  }
}

bool NodeTable::RefuseIfStale(uint64_t conn_id) {
  thread_.Check("NodeTable");
  if (!dead_conns_.contains(conn_id)) return false;
  ++stale_refused_;
  return true;
}

std::vector<NodeId> NodeTable::DropConnection(uint64_t conn_id, Clock::time_point now) {
  thread_.Check("NodeTable");
  std::vector<NodeId> disconnected;
  if (conn_id == 0) return disconnected;
  for (auto& [id, node] : nodes_) {
    if (node.conn_id != conn_id || !node.alive) continue;
    LUMEN_LOG(WARNING) << "node " << id.Hex().substr(0, 12)
                       << " lost its connection; it is declared dead unless it registers again "
                          "within "
                       << silence_limit().count() << " ms";
    node.conn_id = 0;
    // The grace is counted from the close (a report may have been lost with it).
    node.last_report = std::max(node.last_report, now);
    Touch(id, node);  // the other nodes see it without free resources
    disconnected.push_back(id);
  }
  dead_conns_.erase(conn_id);  // closed: nothing more comes on it
  return disconnected;
}

std::vector<NodeTable::DeadNode> NodeTable::DeclareGone(const NodeId& id) {
  thread_.Check("NodeTable");
  auto it = nodes_.find(id);
  if (it == nodes_.end() || !it->second.alive || it->second.conn_id != 0) return {};
  LUMEN_LOG(WARNING) << "node " << id.Hex().substr(0, 12)
                     << " is dead (connection lost and its daemon is gone)";
  return {MarkDead(id, it->second)};
}

std::vector<NodeTable::DeadNode> NodeTable::Leave(const NodeId& id, uint64_t conn_id) {
  thread_.Check("NodeTable");
  auto it = nodes_.find(id);
  if (it == nodes_.end() || !it->second.alive || it->second.conn_id != conn_id) return {};
  LUMEN_LOG(INFO) << "node " << id.Hex().substr(0, 12) << " left";
  return {MarkDead(id, it->second)};
}

bool NodeTable::Restore(const std::string& stats_frame, Clock::time_point alive_until) {
  thread_.Check("NodeTable");
  if (stats_frame.size() <= kFrameHeaderBytes ||
      (stats_frame.size() - kFrameHeaderBytes) % sizeof(capnp::word) != 0) {
    return false;
  }
  std::vector<capnp::word> words((stats_frame.size() - kFrameHeaderBytes) / sizeof(capnp::word));
  std::memcpy(words.data(), stats_frame.data() + kFrameHeaderBytes,
              words.size() * sizeof(capnp::word));
  try {
    capnp::FlatArrayMessageReader reader(kj::arrayPtr(words.data(), words.size()));
    auto stats = reader.getRoot<proto::NodeStats>();
    NodeId id = IdFrom<NodeId>(stats.getNodeId());
    if (dead_.contains(id) || nodes_.contains(id)) return false;
    // As a report on no connection, dated so that its silence is counted
    // from `alive_until`.
    Report(0, stats, alive_until - silence_limit());
    LUMEN_LOG(INFO) << "node " << id.Hex().substr(0, 12) << " restored from the head's state ("
                    << stats.getAddress().cStr() << "); waiting for it to register again";
    return true;
  } catch (const kj::Exception&) {
    return false;
  }
}

const NodeTable::Node* NodeTable::Find(const NodeId& id) const {
  thread_.Check("NodeTable");
  auto it = nodes_.find(id);
  return it == nodes_.end() ? nullptr : &it->second;
}

void NodeTable::FillOne(const Node& node, capnp::List<proto::NodeStats>::Builder list, size_t i) {
  const auto* words =
      reinterpret_cast<const capnp::word*>(node.stats_frame.data() + kFrameHeaderBytes);
  size_t n = (node.stats_frame.size() - kFrameHeaderBytes) / sizeof(capnp::word);
  capnp::FlatArrayMessageReader reader(kj::arrayPtr(words, n));
  list.setWithCaveats(i, reader.getRoot<proto::NodeStats>());
  list[i].setAlive(node.alive);
  // Disconnected: alive (its work goes on) but not to be given more until it
  // registers again.
  if (node.alive && node.conn_id == 0) list[i].initAvailable(0);
}

void NodeTable::FillNodes(capnp::List<proto::NodeStats>::Builder list) const {
  thread_.Check("NodeTable");
  size_t i = 0;
  for (const auto& [id, node] : nodes_) {
    if (i >= list.size()) break;
    FillOne(node, list, i++);
  }
}

size_t NodeTable::CountChangedSince(uint64_t version) const {
  thread_.Check("NodeTable");
  return static_cast<size_t>(
      std::distance(by_version_.upper_bound(version), by_version_.end()));
}

void NodeTable::FillChangedSince(uint64_t version,
                                 capnp::List<proto::NodeStats>::Builder list) const {
  thread_.Check("NodeTable");
  size_t i = 0;
  for (auto it = by_version_.upper_bound(version); it != by_version_.end() && i < list.size();
       ++it) {
    FillOne(nodes_.at(it->second), list, i++);
  }
}

void NodeTable::Touch(const NodeId& id, Node& node) {
  if (node.version != 0) by_version_.erase(node.version);
  node.version = ++version_;
  by_version_.emplace(node.version, id);
}

scheduler::ClusterResourceView NodeTable::ResourceView() const {
  thread_.Check("NodeTable");
  scheduler::ClusterResourceView view;
  for (const auto& [id, node] : nodes_) {
    auto total = scheduler::ResourceSet::FromMap(node.total);
    auto available = scheduler::ResourceSet::FromMap(node.available);
    if (!total.ok() || !available.ok()) continue;
    // A disconnected node gets no bundles: the head could not reach it.
    view.Upsert(std::string(id.Binary()),
                scheduler::NodeResources{*total, *available, node.connected()});
  }
  return view;
}

NodeTable::DeadNode NodeTable::MarkDead(const NodeId& id, Node& node) {
  node.alive = false;
  ++declared_dead_;
  dead_.insert(id);
  if (node.conn_id != 0) dead_conns_.insert(node.conn_id);
  Touch(id, node);
  return DeadNode{id, node.conn_id, node.drivers};
}

}  // namespace lumen::head
