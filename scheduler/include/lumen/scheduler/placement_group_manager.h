// PlacementGroupManager: gang reservation of resources across nodes, as an
// explicit two-phase commit. The head owns one; it feeds it the cluster view,
// node deaths and the nodes' replies, and it reaches the nodes through a
// BundleTransport.
//
//   PlacementGroupManager pgs({.limits = limits, .transport = &transport,
//                              .on_event = [&](const PlacementGroup& g, GroupEvent e) {...}});
//   ASSIGN_OR_RETURN(const PlacementGroup* g, pgs.Create(id, "pg", PlacementStrategy::kPack, bundles));
//   pgs.Schedule(view);                       // after each report or node change
//   pgs.OnBundleReply(ticket, status);        // a node answered a prepare or commit
//   pgs.OnNodeDead(node_id);                  // the head declared a node dead
//   pgs.OnNodeReconnected(node_id);           // its link was reset; it registered again:
//                                             // its unanswered prepares/commits go again
//   pgs.Remove(id);
//
// Lifecycle of a group (GroupState):
//
//   kPending / kInfeasible --Schedule places it--> kPreparing --every node prepared--> kCommitting
//   kCommitting --every node committed--> kCreated
//   kPreparing --its one node prepared and committed (one step)--> kCreated
//   kPreparing / kCommitting --a node refuses, cannot be reached for a prepare, or dies-->
//       rollback: cancel on every node of the attempt, back to kPending (tried again at the
//       next Schedule)
//   kPreparing / kCommitting --a node's link is reset (its reply lost, or the request)-->
//       the same state; the request goes again, same ticket, when the node registers again
//   kCreated --a node holding a bundle dies--> cancel on the others, back to kPending
//   kPending --Schedule: it can never fit the alive nodes' totals--> kInfeasible (and back)
//   any --Remove--> kRemoved (cancel sent when bundles were reserved; final)
//
// A group whose bundles all go to one node skips the second phase (with
// limits.one_step_single_node, the default): one kPrepareCommit request, which
// that node reserves and commits at once, all or none, and one reply; the
// rollback, resend and death rules above are the same as for a prepare.
//
// Invariants: each group is all or nothing on its own (its attempt commits
// only after every node of it prepared, and any refusal, unreachable node or
// death rolls back that group alone); up to `max_attempts_in_flight` groups
// are in kPreparing/kCommitting at once, placed in creation order against the
// nodes' resources less what the attempts under way take (so concurrent
// attempts do not count the same free resources twice); a reply whose ticket
// belongs to an abandoned attempt is ignored (the cancel already sent to its
// node follows the prepare or commit on the same ordered channel, so nothing
// stays reserved). A prepare or commit whose reply was lost with the node's
// link (the node may have acted) is not rolled back: it is sent again, under
// the same ticket (the node's de-duplication key: a node that acted answers
// from its table, core/node/keyed_requests.h), when the node registers again
// within its grace; a commit for a node disconnected at the time waits the
// same way. A reply that never comes is bounded by the head's health check:
// a silent or disconnected node is declared dead after its grace, which
// fails its outstanding tickets.
//
// Removed groups are remembered (for late waits and lists) up to
// `removed_groups_kept`, oldest forgotten first.
//
// Pure logic, no sockets. Not thread-safe: owned by the head's event loop
// (checked in debug builds); the transport and on_event are called on it.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lumen/common/thread_checker.h"
#include "lumen/scheduler/bundle_cancels.h"
#include "lumen/scheduler/bundle_transport.h"
#include "lumen/scheduler/cluster_view.h"
#include "lumen/scheduler/resource_set.h"

namespace lumen::scheduler {

// A group's place in the two-phase commit (transitions: the drawing above).
enum class GroupState {
  kPending,     // waits for room (or was rolled back); Schedule tries it
  kInfeasible,  // the alive nodes' totals can never hold it; Schedule tries it again
  kPreparing,   // phase 1: prepares sent, replies awaited
  kCommitting,  // phase 2: every node prepared, commits sent, replies awaited
  kCreated,     // every bundle committed; leases may use it
  kRemoved,     // final
};

// The name clients see: "PENDING", "INFEASIBLE", "PREPARING" (both phases),
// "CREATED" or "REMOVED".
std::string_view GroupStateName(GroupState state);

struct PlacementGroupLimits {
  size_t max_groups = 10000;             // not removed (LUMEN_MAX_PLACEMENT_GROUPS)
  size_t max_bundles_per_group = 10000;  // LUMEN_MAX_BUNDLES_PER_GROUP
  size_t max_name_bytes = 1024;
  size_t removed_groups_kept = 1000;
  // Groups in kPreparing/kCommitting at once. Their prepares and commits made
  // in one event-loop turn go to a node in one write (Connection's
  // WriteBatch), so a burst of groups costs a few round trips to each node,
  // not two per group.
  size_t max_attempts_in_flight = 64;
  // A group placed on one node alone is prepared and committed in one request
  // (kPrepareCommit): one round trip to the node instead of two. Off: every
  // group goes through both phases.
  bool one_step_single_node = true;
};

struct PlacementGroup {
  std::string id;
  std::string name;
  PlacementStrategy strategy = PlacementStrategy::kPack;
  std::vector<std::map<std::string, double>> bundles;
  GroupState state = GroupState::kPending;
  std::vector<std::string> nodes;  // node id per bundle, once placed (kept after a rollback)
  std::string error;               // why it is not created (yet)
};

// What on_event reports.
enum class GroupEvent {
  kCreated,     // every bundle committed: waiters can be answered, the view changed
  kRolledBack,  // an attempt or a created group was undone; it is pending again
  kRemoved,     // removed by the user: waiters can be answered, the view changed
};

class PlacementGroupManager {
 public:
  struct Options {
    PlacementGroupLimits limits;
    BundleTransport* transport = nullptr;  // borrowed; outlives the manager
    // Called on the manager's thread after each event, with the group as it is
    // now; it may call back into the manager (Schedule, Find), not Remove.
    std::function<void(const PlacementGroup&, GroupEvent)> on_event;
  };

  explicit PlacementGroupManager(Options options);

  // Records a new group (kPending) and returns it; a known id returns the
  // existing group unchanged (a retried create). Errors, for a new id only:
  // ResourceExhausted (max_groups live groups), InvalidArgument (name or bundle
  // count over its limit). A bundle that is not a valid resource set is
  // accepted and stays pending with the reason in `error`.
  [[nodiscard]] absl::StatusOr<const PlacementGroup*> Create(
      const std::string& id, const std::string& name, PlacementStrategy strategy,
      std::vector<std::map<std::string, double>> bundles);

  // Puts back a group a restarted head persisted before it died: kCreated
  // keeps `g.nodes` (the nodes still hold its committed bundles); any other
  // state becomes kPending (an attempt under way died with the old head).
  // Emits no event. Errors: AlreadyExists (a known id), InvalidArgument
  // (kCreated without a node per bundle).
  [[nodiscard]] absl::Status Restore(PlacementGroup g);

  // The error Create would return for a group of `name_bytes` and
  // `bundle_count` under a new id (OK for a known id), so a caller can refuse
  // an oversized request before decoding its bundles.
  [[nodiscard]] absl::Status CheckCreate(const std::string& id, size_t name_bytes,
                                         size_t bundle_count) const;

  // Removes the group (cancelling its reservations, if any); false when it is
  // unknown or already removed. Reports kRemoved.
  bool Remove(const std::string& id);

  // Places the waiting groups that fit `view` (alive nodes' available
  // resources, less what the attempts under way take), oldest first, and
  // starts their prepare phase, up to max_attempts_in_flight attempts at once.
  // Groups that do not fit get `error` (and kInfeasible when they never can).
  void Schedule(const ClusterResourceView& view);

  // A node's answer to the prepare or commit `ticket`; unknown tickets are
  // ignored.
  void OnBundleReply(uint64_t ticket, const absl::Status& status);

  // The node is gone: its outstanding tickets fail (rolling their group back)
  // and created groups with a bundle there go back to pending.
  void OnNodeDead(const std::string& node_id);
  // The node registered again on a new connection (its link to the head was
  // reset): replies to what was sent on the old one may be lost. First the
  // cancels it may have missed go (those that could not be sent while it was
  // disconnected, and those sent but not acknowledged: BundleCancels), then
  // every prepare and commit still awaiting its reply, oldest first, under
  // its ticket: a node that acted answers from its table without acting
  // again, one that never got it acts now. Nothing is rolled back (a resend
  // the transport finds the node dead for is). Its created groups keep their
  // bundles.
  void OnNodeReconnected(const std::string& node_id);

  // Cancels waiting for a disconnected node to come back (for tests and logs).
  size_t pending_cancels() const;
  // Cancels sent or waiting and not acknowledged yet (tests and logs).
  size_t unacknowledged_cancels() const { return cancels_.kept(); }

  // The group, or nullptr when unknown (or forgotten after removal).
  const PlacementGroup* Find(const std::string& id) const;
  // Every known group, by id (removed ones included, up to removed_groups_kept).
  const std::map<std::string, PlacementGroup>& groups() const { return groups_; }
  // The created groups, by id, and their bundles in all: what the nodes'
  // views list, without walking the removed groups kept.
  const std::map<std::string, const PlacementGroup*>& created() const { return created_; }
  size_t created_bundles() const { return created_bundles_; }
  size_t live_groups() const { return live_groups_; }
  // Attempts undone so far (for tests and logs).
  uint64_t rollbacks() const { return rollbacks_; }
  // Prepares and commits, and cancels, sent again to a node that registered
  // again (for tests and metrics).
  uint64_t resent_phases() const { return resent_; }
  uint64_t resent_cancels() const { return cancels_.resent(); }
  // Counts the groups' events (created, removed, rolled back, ...): while it
  // stays the same, so do the committed bundles and where they are.
  uint64_t version() const { return version_; }

 private:
  // Rolls back the attempt in flight when a ticket of `node_id` is
  // outstanding (its reply will not come), saying `why`.
  void FailTicketsOf(const std::string& node_id, const std::string& why);

  struct Ticket {
    std::string group_id;
    std::string node_id;
    BundlePhase phase = BundlePhase::kPrepare;  // kPrepare, kCommit or kPrepareCommit
  };

  // `g`'s bundles on `node_id` as a request of `phase` (ticket 0).
  static BundleRequest RequestFor(const PlacementGroup& g, BundlePhase phase,
                                  const std::string& node_id);
  // Sends the node's outstanding prepares and commits again, under their
  // tickets, oldest first (it registered again).
  void ResendTicketsOf(const std::string& node_id);

  // True when every bundle of `g` is placed on the same node.
  static bool OneNode(const PlacementGroup& g);
  // Sends `phase` of `g` to each node it uses, one request per node. Prepare,
  // commit and prepare-commit register tickets; returns false when a node
  // could not be reached.
  bool SendPhase(PlacementGroup& g, BundlePhase phase);
  // Undoes the attempt or the reservation of `g`: cancels everywhere, drops its
  // tickets, back to kPending with `why`.
  void RollBack(PlacementGroup& g, const std::string& why);
  // Moves `g` to `state`, keeping waiting_ and created_ in step (every state
  // change goes through here).
  void SetState(PlacementGroup& g, GroupState state);
  void DropTickets(const std::string& group_id);
  void Emit(const PlacementGroup& g, GroupEvent event);
  void ForgetOldRemovedGroups();

  Options options_;
  std::map<std::string, PlacementGroup> groups_;
  std::map<uint64_t, std::string> order_;                   // creation sequence -> id
  absl::flat_hash_map<std::string, uint64_t> sequence_of_;  // id -> creation sequence
  uint64_t next_sequence_ = 1;
  std::deque<std::string> removed_order_;  // removed ids, oldest first
  // Indices into groups_ (std::map nodes do not move): the groups Schedule
  // tries (kPending, kInfeasible) by creation sequence, and the kCreated ones
  // by id. A Schedule or a view then costs O(those), not O(groups kept).
  std::map<uint64_t, PlacementGroup*> waiting_;
  std::map<std::string, const PlacementGroup*> created_;
  size_t created_bundles_ = 0;
  size_t live_groups_ = 0;
  // The attempts under way: group -> replies still awaited for its phase.
  std::map<std::string, size_t> in_flight_;
  absl::flat_hash_map<uint64_t, Ticket> tickets_;
  // Every cancel until its node acknowledges it: sent (again) when a
  // disconnected node registers again, dropped when it dies.
  BundleCancels cancels_;
  uint64_t next_ticket_ = 1;
  uint64_t rollbacks_ = 0;
  uint64_t resent_ = 0;
  uint64_t version_ = 0;
  ThreadChecker thread_;
};

}  // namespace lumen::scheduler
