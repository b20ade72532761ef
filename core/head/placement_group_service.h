// PlacementGroupService: the head's placement-group requests (create, wait,
// remove, list) and the nodes' bundle replies, over the two-phase-commit
// manager in lumen/scheduler/placement_group_manager.h. It owns the manager,
// its transport over the node connections, the waits parked until a group is
// created or removed (each with its timer), and the log of removed groups the
// cluster view sends to nodes.
//
//   PlacementGroupService pgs({.io = &io, .nodes = &nodes, .limits = limits,
//                              .max_wait = timeouts.max_parked_wait,
//                              .find_connection = find, .on_view_changed = [&] { views.Broadcast(); }});
//   if (pgs.Handle(conn, msg)) return;   // answered, parked, or a bundle reply
//   pgs.Schedule();                      // after reports and node changes
//   pgs.OnNodeDead(id);
//   pgs.DropConnection(conn.id());       // its parked waits go
//
// Only on the head's event loop (checked in debug builds).
#pragma once

#include <boost/asio.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "core/head/change_log.h"
#include "core/head/head_state_recorder.h"
#include "core/head/node_bundle_transport.h"
#include "core/head/node_table.h"
#include "lumen/common/connection.h"
#include "lumen/common/thread_checker.h"
#include "lumen/head/head_service.h"
#include "lumen/scheduler/placement_group_manager.h"

namespace lumen::head {

class PlacementGroupService {
 public:
  struct Options {
    boost::asio::io_context* io = nullptr;  // borrowed; runs the wait timers
    const NodeTable* nodes = nullptr;       // borrowed; where bundles go
    HeadLimits limits;
    // A wait asking for longer is parked this long (Timeouts::max_parked_wait).
    std::chrono::milliseconds max_wait{24ll * 3600 * 1000};
    // The open connection with that id, or nullptr.
    std::function<Connection*(uint64_t)> find_connection;
    // A group was created or removed: the nodes need a new view. Called at
    // most once per `view_coalesce` for all the changes within it.
    std::function<void()> on_view_changed;
    std::chrono::microseconds view_coalesce{1000};
    // Borrowed; told each group's creation, placement and removal
    // (persistence). nullptr: none.
    HeadStateRecorder* recorder = nullptr;
  };

  explicit PlacementGroupService(Options options);

  // Handles `msg` if it is a placement-group request or a bundle reply;
  // false for any other message.
  bool Handle(Connection& conn, proto::Envelope::Reader msg);
  // Places what waits, against the nodes' last reports.
  void Schedule();
  // A node died: its phase replies will not come, its bundles are lost.
  void OnNodeDead(const NodeId& id) { manager_.OnNodeDead(std::string(id.Binary())); }
  // A node registered again on a new connection: replies sent on its old one
  // may be lost (its unanswered prepares, commits and cancels go again, with
  // their keys); its bundles stay.
  void OnNodeReconnected(const NodeId& id) {
    manager_.OnNodeReconnected(std::string(id.Binary()));
  }
  // Forgets the parked waits of a closed connection.
  void DropConnection(uint64_t conn_id);

  // Puts a persisted group back (a restarted head, before it serves): a
  // created group keeps its bundles' nodes (they still hold them), any other
  // waits to be placed. False when `value` is malformed or refused.
  bool Restore(const std::string& value);

  // Every group the head knows, as `lumen list placement-groups` gets them.
  void FillList(proto::Envelope::Builder env) const;

  const scheduler::PlacementGroupManager& manager() const { return manager_; }
  // Removed group ids, in removal order (the cluster view sends them once).
  const ChangeLog<std::string>& removed() const { return removed_; }

 private:
  static constexpr size_t kRemovedGroupsLogged = 1000;
  using WaitKey = std::pair<uint64_t, uint64_t>;  // (connection, request id)
  struct ParkedWait {
    std::string group_id;
    std::unique_ptr<boost::asio::steady_timer> timer;
  };

  void OnCreate(Connection& conn, proto::Envelope::Reader msg);
  void OnWait(Connection& conn, proto::Envelope::Reader msg);
  void OnRemove(Connection& conn, proto::Envelope::Reader msg);
  void OnList(Connection& conn, uint64_t request_id);
  void OnEvent(const scheduler::PlacementGroup& g, scheduler::GroupEvent event);
  // Groups were created or removed: the nodes get a new view within
  // view_coalesce (one for all the changes in that window), and, when
  // `schedule`, waiting groups are placed once this event-loop turn's events
  // are all in (one posted handler).
  void AtTurnEnd(bool schedule);
  // Tells the recorder `g` as it is now (deleted once removed).
  void Record(const scheduler::PlacementGroup& g);
  // Answers every wait parked on `g` with its state now.
  void AnswerWaits(const scheduler::PlacementGroup& g);
  void Unpark(const WaitKey& key);
  // Answers with `g`'s state; `g` nullptr: "no such placement group".
  void ReplyState(Connection& conn, uint64_t request_id, const scheduler::PlacementGroup* g);
  // Answers with a refused or unknown group: REMOVED with `error`.
  void ReplyRemoved(Connection& conn, uint64_t request_id, const std::string& group_id,
                    const std::string& error);

  Options options_;
  NodeBundleTransport transport_;
  scheduler::PlacementGroupManager manager_;
  ChangeLog<std::string> removed_;
  std::map<WaitKey, ParkedWait> parked_;
  std::map<std::string, std::set<WaitKey>> waits_by_group_;
  absl::flat_hash_map<uint64_t, size_t> parked_per_connection_;
  boost::asio::steady_timer view_timer_;  // AtTurnEnd's view broadcast
  bool view_due_ = false;                 // view_timer_ is armed
  bool schedule_posted_ = false;          // AtTurnEnd's Schedule is queued
  ThreadChecker thread_;
};

}  // namespace lumen::head
