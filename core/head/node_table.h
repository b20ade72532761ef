// NodeTable: the head's table of nodes and their health. Each node's last
// report (resources, drivers, the whole NodeStats frame for `lumen status`),
// the connection it reports on, and the head's verdict on whether it lives.
//
//   NodeTable nodes({.health_check_period = 500ms, .failure_threshold = 5});
//   switch (nodes.Report(conn.id(), msg.getReportNode(), now)) { ... }
//   for (const NodeTable::DeadNode& d : nodes.ExpireSilent(now)) { /* tell the others */ }
//   nodes.FillNodes(env.initNodes(nodes.size()));
//
// Health: a node that has not reported for `failure_threshold` periods is
// declared dead. Silence is counted in the head's own time: when the head
// itself ran late (starved of CPU, its health-check timer fired late), the
// reports that came meanwhile may still be unread in its sockets, so the head
// excuses that stall (ExcuseSilence) instead of declaring every node dead at
// once. A dead node's id is remembered: its incarnation may not come
// back (a restarted node registers under a new id).
//
// A lost connection is not a death (doc/reliability.md, item 8): the node is
// disconnected (alive, no connection: no bundles are placed on it and other
// nodes see no free resources on it) for the silence limit counted from the
// close; if it registers again under its id on a new connection by then it
// goes on as the same node (kRejoined), else ExpireSilent declares it dead.
// A restored node (a restarted head) is disconnected in the same way until
// it registers. Time is an argument of
// every call that needs it, so tests drive it with a manual clock.
//
// No I/O. Not thread-safe: owned by the head's event loop (checked in debug
// builds).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "lumen/common/ids.h"
#include "lumen/common/thread_checker.h"
#include "lumen/common/timeouts.h"
#include "lumen/proto/lumen.capnp.h"
#include "lumen/scheduler/cluster_view.h"

namespace lumen::head {

class NodeTable {
 public:
  using Clock = std::chrono::steady_clock;

  struct Options {
    std::chrono::milliseconds health_check_period{500};
    int failure_threshold = 5;
  };

  struct Node {
    uint64_t conn_id = 0;  // the connection it reports on; 0: disconnected (or restored)
    bool alive = true;
    Clock::time_point last_report;
    std::map<std::string, double> total;
    std::map<std::string, double> available;
    std::vector<JobId> drivers;  // jobs whose driver is attached to this node
    std::string stats_frame;     // its last report, as a framed NodeStats message
    std::string address;            // its daemon's address, as last reported
    std::string transfer_address;   // where its objects are pulled from, as last reported
    // Its store use as last reported, in steps of 1/kStoreLevels of its
    // capacity (-1: no capacity reported). Other nodes' DEFAULT policy counts
    // store use, so a change of step is a change they see; smaller changes
    // are not (they would make every report a view update).
    int store_level = -1;
    // NodeTable::version() when what other nodes see of it (liveness,
    // resources, addresses, store_level) last changed; its periodic reports that change
    // nothing of that leave it alone.
    uint64_t version = 0;
    // Alive and on an open connection: bundles may be placed on it, and
    // other nodes see its free resources.
    bool connected() const { return alive && conn_id != 0; }
  };

  // A node just declared dead, and what went with it.
  struct DeadNode {
    NodeId id;
    uint64_t conn_id = 0;
    std::vector<JobId> drivers;
  };

  enum class ReportOutcome {
    kJoined,    // first report of this node: every node should get a new view
    kRejoined,  // a known, alive node registered again on a new connection
                // (its link reset, or the head restarted): a new view for all,
                // the whole view for it, and what was in flight on its old
                // connection is lost
    kUpdated,   // a known node's periodic report
    kRefused,   // its incarnation was declared dead: it must not come back
    kIgnored,   // a report on a connection the node no longer uses (it
                // registered again on another): dropped
  };

  // Steps of store use a report must cross to reach the other nodes (5%;
  // scheduler::kStoreNearlyFull, 0.8, is a step boundary).
  static constexpr uint64_t kStoreLevels = 20;
  // floor(used / capacity * kStoreLevels), capped at kStoreLevels; -1 when
  // `capacity` is 0.
  static int StoreLevel(uint64_t used, uint64_t capacity);

  explicit NodeTable(Options options) : options_(options) {}

  // Records a registration (`registering`) or a periodic report received at
  // `now` on connection `conn_id`. Only a registration moves a known node to
  // a new connection.
  ReportOutcome Report(uint64_t conn_id, proto::NodeStats::Reader stats, Clock::time_point now,
                       bool registering = true);
  // A restarted head puts back a node it persisted: `stats_frame` is its
  // registration (a framed NodeStats, as Node::stats_frame). It counts as
  // alive, with no connection, until `alive_until` plus the silence limit
  // passes without it registering again (same id, on a new connection: then
  // Report says kJoined). False when the frame is malformed or the id dead.
  bool Restore(const std::string& stats_frame, Clock::time_point alive_until);
  // A restarted head remembers a node declared dead before: never accepted again.
  void RestoreDead(const NodeId& id) { dead_.insert(id); }
  // True when the node was declared dead (its reports are refused).
  bool WasDeclaredDead(const NodeId& id) const { return dead_.contains(id); }
  // The node epoch check, run on every frame of a node's connection: true (and
  // counted in stale_refused()) when `conn_id` is the connection of a node
  // incarnation that was declared dead. Whatever that incarnation still sends
  // (reports queued while it was frozen, bundle replies, ended jobs) is stale
  // and must be dropped: the cluster already gave its work to other nodes.
  bool RefuseIfStale(uint64_t conn_id);
  // How many frames RefuseIfStale refused, and reports of dead incarnations
  // Report refused, since the start (for /metrics and tests).
  uint64_t stale_refused() const { return stale_refused_; }
  // Registrations of alive nodes on a new connection (kRejoined), since the
  // start; restored nodes registering after a head restart included.
  uint64_t rejoined() const { return rejoined_; }
  // Nodes declared dead since the start (silent, disconnected past the limit,
  // or left).
  uint64_t declared_dead() const { return declared_dead_; }

  // Declares dead every alive node silent for more than `failure_threshold`
  // periods as of `now`, and returns them.
  std::vector<DeadNode> ExpireSilent(Clock::time_point now);
  // The head was stalled for `stall` (its check ran that late) up to `now`:
  // that time does not count as any alive node's silence. O(nodes).
  void ExcuseSilence(Clock::duration stall, Clock::time_point now);
  // The connection `conn_id` closed at `now`: the alive nodes reporting on it
  // are disconnected (see above) and returned; none is declared dead here.
  std::vector<NodeId> DropConnection(uint64_t conn_id, Clock::time_point now);
  // Declares `id` dead if it is disconnected (alive without a connection):
  // its daemon was found gone (NodeProbe); empty otherwise.
  std::vector<DeadNode> DeclareGone(const NodeId& id);
  // Declares `id` dead if it is alive and reports on `conn_id` (it leaves on
  // purpose); empty otherwise.
  std::vector<DeadNode> Leave(const NodeId& id, uint64_t conn_id);

  // The node, or nullptr when unknown.
  const Node* Find(const NodeId& id) const;
  const std::map<NodeId, Node>& nodes() const { return nodes_; }
  size_t size() const { return nodes_.size(); }

  // Every node's last report with the head's verdict in `alive`; `list` has size().
  void FillNodes(capnp::List<proto::NodeStats>::Builder list) const;

  // Versions, for sending nodes only what changed (the cluster view's deltas):
  // every join, death, and change of a node's resources or addresses takes the
  // next number. 0 before anything happened.
  uint64_t version() const { return version_; }
  // How many nodes changed after `version`. O(changes).
  size_t CountChangedSince(uint64_t version) const;
  // The nodes changed after `version` (last report, verdict in `alive`), oldest
  // change first; `list` has CountChangedSince(version). O(changes).
  void FillChangedSince(uint64_t version, capnp::List<proto::NodeStats>::Builder list) const;
  // The nodes' resources for the scheduler (node id bytes -> total, available, alive).
  scheduler::ClusterResourceView ResourceView() const;
  // How long a node may stay silent before it is declared dead.
  std::chrono::milliseconds silence_limit() const {
    return TimesCapped(options_.health_check_period, options_.failure_threshold);
  }
  const Options& options() const { return options_; }

 private:
  DeadNode MarkDead(const NodeId& id, Node& node);
  // Gives `node` the next version (it changed for the other nodes).
  void Touch(const NodeId& id, Node& node);
  // Copies `node`'s last report into `list[i]`, with the head's verdict.
  static void FillOne(const Node& node, capnp::List<proto::NodeStats>::Builder list, size_t i);

  Options options_;
  std::map<NodeId, Node> nodes_;
  absl::flat_hash_set<NodeId> dead_;
  // Connections of dead incarnations still open (erased when they close).
  absl::flat_hash_set<uint64_t> dead_conns_;
  uint64_t stale_refused_ = 0;
  uint64_t rejoined_ = 0;
  uint64_t declared_dead_ = 0;
  uint64_t version_ = 0;
  std::map<uint64_t, NodeId> by_version_;  // each node under its current version
  ThreadChecker thread_;
};

}  // namespace lumen::head
