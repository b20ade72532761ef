#include "lumen/scheduler/placement_group_manager.h"

#include <algorithm>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "lumen/common/logging.h"

namespace lumen::scheduler {
namespace {

std::string ShortId(const std::string& bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string hex;
  for (size_t i = 0; i < bytes.size() && hex.size() < 12; ++i) {
    auto c = static_cast<unsigned char>(bytes[i]);
    hex += kDigits[c >> 4];
    hex += kDigits[c & 15];
  }
  return hex;
}

}  // namespace

const char* BundlePhaseName(BundlePhase phase) {
  switch (phase) {
    case BundlePhase::kPrepare:
      return "PREPARE";
    case BundlePhase::kCommit:
      return "COMMIT";
    case BundlePhase::kCancel:
      return "CANCEL";
    case BundlePhase::kPrepareCommit:
      return "PREPARE_COMMIT";
  }
  return "?";
}

std::string_view GroupStateName(GroupState state) {
  switch (state) {
    case GroupState::kPending:
      return "PENDING";
    case GroupState::kInfeasible:
      return "INFEASIBLE";
    case GroupState::kPreparing:
    case GroupState::kCommitting:
      return "PREPARING";
    case GroupState::kCreated:
      return "CREATED";
    case GroupState::kRemoved:
      return "REMOVED";
  }
  return "?";
}

PlacementGroupManager::PlacementGroupManager(Options options)
    : options_(std::move(options)), cancels_(options_.transport) {}

absl::StatusOr<const PlacementGroup*> PlacementGroupManager::Create(
    const std::string& id, const std::string& name, PlacementStrategy strategy,
    std::vector<std::map<std::string, double>> bundles) {
  thread_.Check("PlacementGroupManager");
  if (auto it = groups_.find(id); it != groups_.end()) return &it->second;
  if (absl::Status refused = CheckCreate(id, name.size(), bundles.size()); !refused.ok()) {
    return refused;
  }
  PlacementGroup& g = groups_[id];
  g.id = id;
  g.name = name;
  g.strategy = strategy;
  g.bundles = std::move(bundles);
  uint64_t sequence = next_sequence_++;
  order_[sequence] = id;
  sequence_of_[id] = sequence;
  ++live_groups_;
  waiting_[sequence] = &g;  // kPending
  return &g;
}

absl::Status PlacementGroupManager::Restore(PlacementGroup g) {
  thread_.Check("PlacementGroupManager");
  if (groups_.contains(g.id)) {
    return absl::AlreadyExistsError(absl::StrCat("placement group ", g.id, " is known already"));
  }
  if (g.state == GroupState::kCreated && g.nodes.size() != g.bundles.size()) {
    return absl::InvalidArgumentError("a created placement group needs a node per bundle");
  }
  const GroupState state = g.state == GroupState::kCreated ? GroupState::kCreated
                                                           : GroupState::kPending;
  g.state = GroupState::kRemoved;  // not indexed yet: SetState indexes it
  std::string id = g.id;
  PlacementGroup& restored = groups_[id] = std::move(g);
  uint64_t sequence = next_sequence_++;
  order_[sequence] = id;
  sequence_of_[id] = sequence;
  ++live_groups_;
  SetState(restored, state);
  ++version_;
  return absl::OkStatus();
}

absl::Status PlacementGroupManager::CheckCreate(const std::string& id, size_t name_bytes,
                                               size_t bundle_count) const {
  if (groups_.contains(id)) return absl::OkStatus();
  const PlacementGroupLimits& limits = options_.limits;
  if (live_groups_ >= limits.max_groups) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the cluster already has ", live_groups_,
                     " placement groups, the limit (LUMEN_MAX_PLACEMENT_GROUPS); remove some first"));
  }
  if (name_bytes > limits.max_name_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("a placement group name of ", name_bytes,
                                                   " bytes is over the limit of ",
                                                   limits.max_name_bytes, " bytes"));
  }
  if (bundle_count > limits.max_bundles_per_group) {
    return absl::InvalidArgumentError(absl::StrCat("a placement group of ", bundle_count,
                                                   " bundles is over the limit of ",
                                                   limits.max_bundles_per_group));
  }
  return absl::OkStatus();
}

bool PlacementGroupManager::Remove(const std::string& id) {
  thread_.Check("PlacementGroupManager");
  auto it = groups_.find(id);
  if (it == groups_.end() || it->second.state == GroupState::kRemoved) return false;
  PlacementGroup& g = it->second;
  bool reserved = g.state == GroupState::kPreparing || g.state == GroupState::kCommitting ||
                  g.state == GroupState::kCreated;
  if (reserved) SendPhase(g, BundlePhase::kCancel);
  if (in_flight_.erase(id) > 0) DropTickets(id);
  SetState(g, GroupState::kRemoved);
  --live_groups_;
  removed_order_.push_back(id);
  Emit(g, GroupEvent::kRemoved);
  ForgetOldRemovedGroups();
  return true;
}

namespace {

// The group's bundles as resource sets; false (and `error` says why) when one
// is not a valid resource set.
bool BundleSets(const PlacementGroup& g, std::vector<ResourceSet>* sets, std::string* error) {
  for (const auto& b : g.bundles) {
    auto set = ResourceSet::FromMap(b);
    if (!set.ok()) {
      *error = std::string(set.status().message());
      return false;
    }
    sets->push_back(*std::move(set));
  }
  return true;
}

}  // namespace

void PlacementGroupManager::Schedule(const ClusterResourceView& view) {
  thread_.Check("PlacementGroupManager");
  const size_t max_in_flight = std::max<size_t>(1, options_.limits.max_attempts_in_flight);
  if (waiting_.empty() || in_flight_.size() >= max_in_flight) return;
  // What is left once the attempts under way (and those this pass starts)
  // took their bundles: the nodes' reports may not show them yet. (A report
  // that does show one makes this conservative: a group that then does not
  // fit waits for the next Schedule, after that attempt ends.)
  ClusterResourceView room = view;
  auto take = [&room](const PlacementGroup& g, const std::vector<ResourceSet>& sets) {
    for (size_t i = 0; i < sets.size() && i < g.nodes.size(); ++i) room.Subtract(g.nodes[i], sets[i]);
  };
  for (const auto& [id, unused] : in_flight_) {
    const PlacementGroup& g = groups_.at(id);
    std::vector<ResourceSet> sets;
    std::string ignored;
    if (BundleSets(g, &sets, &ignored)) take(g, sets);
  }
  // Only the waiting groups, oldest first (not every group the head keeps).
  for (auto wit = waiting_.begin(); wit != waiting_.end() && in_flight_.size() < max_in_flight;) {
    PlacementGroup& g = *(wit++)->second;
    std::vector<ResourceSet> bundles;
    if (!BundleSets(g, &bundles, &g.error)) continue;
    auto placed = room.PlaceBundles(bundles, g.strategy);
    if (!placed.ok()) {
      if (g.error != placed.status().message()) {
        LUMEN_LOG(INFO) << "placement group " << g.name << " waits: " << placed.status().message();
      }
      g.error = std::string(placed.status().message());
      SetState(g, placed.status().code() == absl::StatusCode::kFailedPrecondition
                      ? GroupState::kInfeasible
                      : GroupState::kPending);
      continue;
    }
    g.nodes = *std::move(placed);
    SetState(g, GroupState::kPreparing);
    g.error.clear();
    in_flight_[g.id] = 0;
    if (!SendPhase(g, OneNode(g) && options_.limits.one_step_single_node
                          ? BundlePhase::kPrepareCommit
                          : BundlePhase::kPrepare)) {
      RollBack(g, "a chosen node is gone");
      continue;
    }
    take(g, bundles);
  }
}

void PlacementGroupManager::OnBundleReply(uint64_t ticket, const absl::Status& status) {
  thread_.Check("PlacementGroupManager");
  if (cancels_.OnReply(ticket)) return;  // a cancel acknowledged
  auto it = tickets_.find(ticket);
  if (it == tickets_.end()) return;  // an abandoned attempt's reply
  std::string group_id = std::move(it->second.group_id);
  const BundlePhase phase = it->second.phase;
  tickets_.erase(it);
  auto fit = in_flight_.find(group_id);
  if (fit == in_flight_.end()) return;  // not possible: its tickets go with it
  --fit->second;
  auto git = groups_.find(group_id);
  if (git == groups_.end()) return;
  PlacementGroup& g = git->second;
  if (g.state != GroupState::kPreparing && g.state != GroupState::kCommitting) return;
  if (!status.ok()) {
    LUMEN_LOG(INFO) << "placement group " << g.name << ": a node refused (" << status.message()
                    << "); rolling back";
    RollBack(g, std::string(status.message()));
    return;
  }
  if (fit->second > 0) return;  // other nodes of this phase still to answer
  if (g.state == GroupState::kPreparing && phase != BundlePhase::kPrepareCommit) {
    SetState(g, GroupState::kCommitting);
    if (!SendPhase(g, BundlePhase::kCommit)) RollBack(g, "a chosen node is gone");
    return;
  }
  SetState(g, GroupState::kCreated);
  in_flight_.erase(fit);
  Emit(g, GroupEvent::kCreated);
}

void PlacementGroupManager::FailTicketsOf(const std::string& node_id, const std::string& why) {
  std::set<std::string> lost;  // the attempts waiting on a reply of that node
  for (const auto& [ticket, t] : tickets_) {
    if (t.node_id == node_id) lost.insert(t.group_id);
  }
  for (const std::string& id : lost) {
    auto git = groups_.find(id);
    if (git == groups_.end() || !in_flight_.contains(id)) continue;
    LUMEN_LOG(INFO) << "placement group " << git->second.name << ": node " << ShortId(node_id)
                    << " " << why << " during " << GroupStateName(git->second.state)
                    << "; rolling back";
    RollBack(git->second, "the node " + why);
  }
}

void PlacementGroupManager::OnNodeReconnected(const std::string& node_id) {
  thread_.Check("PlacementGroupManager");
  // First the cancels it may have missed (oldest first), then the prepares
  // and commits whose replies were lost, again under their tickets: the
  // same order as they were first sent in (every kept cancel of a group is
  // older than its attempt under way).
  cancels_.OnNodeReconnected(node_id);
  ResendTicketsOf(node_id);
}

void PlacementGroupManager::ResendTicketsOf(const std::string& node_id) {
  std::vector<uint64_t> outstanding;  // oldest first
  for (const auto& [ticket, t] : tickets_) {
    if (t.node_id == node_id) outstanding.push_back(ticket);
  }
  std::sort(outstanding.begin(), outstanding.end());
  for (uint64_t ticket : outstanding) {
    auto it = tickets_.find(ticket);
    if (it == tickets_.end()) continue;  // its group was rolled back meanwhile
    const Ticket t = it->second;
    PlacementGroup& g = groups_.at(t.group_id);
    BundleRequest request = RequestFor(g, t.phase, node_id);
    request.ticket = ticket;
    absl::Status sent = options_.transport->Send(request);
    if (sent.code() == absl::StatusCode::kUnavailable) return;  // gone again: the rest wait too
    if (!sent.ok()) {
      LUMEN_LOG(INFO) << "placement group " << g.name << ": node " << ShortId(node_id)
                      << " is gone (" << sent.message() << "); rolling back";
      RollBack(g, "a chosen node is gone");
      continue;
    }
    ++resent_;
    LUMEN_LOG(INFO) << "placement group " << g.name << ": node " << ShortId(node_id)
                    << " is back; resending its " << BundlePhaseName(t.phase)
                    << " (ticket " << ticket << ", answered once)";
  }
}

size_t PlacementGroupManager::pending_cancels() const { return cancels_.unsent(); }

void PlacementGroupManager::OnNodeDead(const std::string& node_id) {
  thread_.Check("PlacementGroupManager");
  FailTicketsOf(node_id, "died");
  cancels_.OnNodeDead(node_id);  // its bundles went with it
  std::vector<std::string> hit;
  for (const auto& [id, g] : created_) {
    if (std::find(g->nodes.begin(), g->nodes.end(), node_id) != g->nodes.end()) {
      hit.push_back(id);
    }
  }
  for (const auto& id : hit) {
    PlacementGroup& g = groups_.at(id);
    LUMEN_LOG(WARNING) << "placement group " << g.name << " lost a bundle on node "
                       << ShortId(node_id) << "; placing it again";
    RollBack(g, "a node holding one of its bundles died");
  }
}

const PlacementGroup* PlacementGroupManager::Find(const std::string& id) const {
  thread_.Check("PlacementGroupManager");
  auto it = groups_.find(id);
  return it == groups_.end() ? nullptr : &it->second;
}

BundleRequest PlacementGroupManager::RequestFor(const PlacementGroup& g, BundlePhase phase,
                                                const std::string& node_id) {
  BundleRequest request;
  request.phase = phase;
  request.group_id = g.id;
  request.node_id = node_id;
  for (size_t i = 0; i < g.nodes.size() && i < g.bundles.size(); ++i) {
    if (g.nodes[i] == node_id) request.bundles.push_back({static_cast<int>(i), g.bundles[i]});
  }
  return request;
}

bool PlacementGroupManager::OneNode(const PlacementGroup& g) {
  return std::all_of(g.nodes.begin(), g.nodes.end(),
                     [&](const std::string& node) { return node == g.nodes.front(); });
}

bool PlacementGroupManager::SendPhase(PlacementGroup& g, BundlePhase phase) {
  // One pass over the bundles (RequestFor per node would be nodes x bundles).
  std::map<std::string, std::vector<IndexedBundle>> per_node;
  for (size_t i = 0; i < g.nodes.size() && i < g.bundles.size(); ++i) {
    per_node[g.nodes[i]].push_back({static_cast<int>(i), g.bundles[i]});
  }
  bool reached_all = true;
  for (auto& [node, bundles] : per_node) {
    BundleRequest request;
    request.ticket = next_ticket_++;
    request.phase = phase;
    request.group_id = g.id;
    request.node_id = node;
    request.bundles = std::move(bundles);
    if (phase == BundlePhase::kCancel) {
      // Kept until the node acknowledges it; a disconnected node gets it when
      // it registers again (a dead one has nothing left to release).
      cancels_.Send(std::move(request));
      continue;
    }
    absl::Status sent = options_.transport->Send(request);
    // A commit for a node that is disconnected (alive, its link reset after
    // it prepared) waits under its ticket like one whose reply was lost: it
    // goes when the node registers again (ResendTicketsOf), or the node's
    // death rolls the group back. A prepare is refused: the attempt just
    // began, it may be placed elsewhere at once.
    const bool waits =
        phase == BundlePhase::kCommit && sent.code() == absl::StatusCode::kUnavailable;
    if (!sent.ok() && !waits) {
      LUMEN_LOG(DEBUG) << "placement group " << g.name << ": " << BundlePhaseName(phase)
                       << " not sent to node " << ShortId(node) << ": " << sent.message();
      reached_all = false;
      break;
    }
    tickets_[request.ticket] = Ticket{g.id, node, phase};
    ++in_flight_[g.id];
  }
  return reached_all;
}

void PlacementGroupManager::SetState(PlacementGroup& g, GroupState state) {
  const uint64_t sequence = sequence_of_.at(g.id);
  const bool was_waiting = g.state == GroupState::kPending || g.state == GroupState::kInfeasible;
  const bool waits = state == GroupState::kPending || state == GroupState::kInfeasible;
  if (was_waiting && !waits) waiting_.erase(sequence);
  if (!was_waiting && waits) waiting_[sequence] = &g;
  if (g.state == GroupState::kCreated && state != GroupState::kCreated) {
    created_.erase(g.id);
    created_bundles_ -= g.bundles.size();
  }
  if (g.state != GroupState::kCreated && state == GroupState::kCreated) {
    created_[g.id] = &g;
    created_bundles_ += g.bundles.size();
  }
  g.state = state;
}

void PlacementGroupManager::RollBack(PlacementGroup& g, const std::string& why) {
  SendPhase(g, BundlePhase::kCancel);
  DropTickets(g.id);
  in_flight_.erase(g.id);
  SetState(g, GroupState::kPending);
  g.error = why;
  ++rollbacks_;
  Emit(g, GroupEvent::kRolledBack);
}

void PlacementGroupManager::DropTickets(const std::string& group_id) {
  absl::erase_if(tickets_, [&](const auto& t) { return t.second.group_id == group_id; });
}

void PlacementGroupManager::Emit(const PlacementGroup& g, GroupEvent event) {
  ++version_;
  if (options_.on_event) options_.on_event(g, event);
}

void PlacementGroupManager::ForgetOldRemovedGroups() {
  while (removed_order_.size() > options_.limits.removed_groups_kept) {
    std::string id = std::move(removed_order_.front());
    removed_order_.pop_front();
    auto it = groups_.find(id);
    if (it == groups_.end() || it->second.state != GroupState::kRemoved) continue;
    groups_.erase(it);
    if (auto sit = sequence_of_.find(id); sit != sequence_of_.end()) {
      order_.erase(sit->second);
      sequence_of_.erase(sit);
    }
  }
}

}  // namespace lumen::scheduler
