#include "core/head/placement_group_service.h"

#include <capnp/serialize.h>

#include <cstring>
#include <string_view>
#include <utility>
#include <vector>

#include "core/head/head_replies.h"
#include "lumen/common/post.h"
#include "lumen/common/proto_util.h"
#include "lumen/common/timeouts.h"

namespace lumen::head {
namespace {

using scheduler::GroupState;
using scheduler::PlacementGroup;

void FillState(proto::PlacementGroupState::Builder out, const PlacementGroup& g) {
  out.setGroupId(BytesOf(g.id));
  out.setName(g.name);
  out.setStrategy(static_cast<proto::PlacementStrategy>(g.strategy));
  out.setState(std::string(scheduler::GroupStateName(g.state)));
  out.setError(g.error);
  auto bundles = out.initBundles(g.bundles.size());
  for (size_t i = 0; i < g.bundles.size(); ++i) {
    bundles[i].setIndex(static_cast<int32_t>(i));
    SetResources(bundles[i].initResources(g.bundles[i].size()), g.bundles[i]);
    if (i < g.nodes.size()) bundles[i].setNodeId(BytesOf(g.nodes[i]));
  }
}

}  // namespace

PlacementGroupService::PlacementGroupService(Options options)
    : options_(std::move(options)),
      transport_(options_.nodes, options_.find_connection),
      manager_({.limits = {.max_groups = options_.limits.max_placement_groups,
                           .max_bundles_per_group = options_.limits.max_bundles_per_group,
                           .max_name_bytes = options_.limits.max_name_bytes,
                           .one_step_single_node = options_.limits.placement_group_one_step != 0},
                .transport = &transport_,
                .on_event = [this](const PlacementGroup& g,
                                   scheduler::GroupEvent event) { OnEvent(g, event); }}),
      removed_(kRemovedGroupsLogged),
      view_timer_(*options_.io) {}

bool PlacementGroupService::Handle(Connection& conn, proto::Envelope::Reader msg) {
  thread_.Check("PlacementGroupService");
  switch (msg.which()) {
    case proto::Envelope::CREATE_PLACEMENT_GROUP:
      OnCreate(conn, msg);
      return true;
    case proto::Envelope::WAIT_PLACEMENT_GROUP:
      OnWait(conn, msg);
      return true;
    case proto::Envelope::REMOVE_PLACEMENT_GROUP:
      OnRemove(conn, msg);
      return true;
    case proto::Envelope::LIST_PLACEMENT_GROUPS:
      OnList(conn, msg.getRequestId());
      return true;
    case proto::Envelope::BUNDLE_REPLY: {
      auto reply = msg.getBundleReply();
      manager_.OnBundleReply(msg.getRequestId(),
                             reply.getOk() ? absl::OkStatus()
                                           : absl::Status(absl::StatusCode::kUnavailable,
                                                          reply.getError().cStr()));
      return true;
    }
    default:
      return false;
  }
}

void PlacementGroupService::Schedule() {
  thread_.Check("PlacementGroupService");
  manager_.Schedule(options_.nodes->ResourceView());
}

void PlacementGroupService::DropConnection(uint64_t conn_id) {
  thread_.Check("PlacementGroupService");
  std::vector<WaitKey> keys;
  for (auto it = parked_.lower_bound({conn_id, 0});
       it != parked_.end() && it->first.first == conn_id; ++it) {
    keys.push_back(it->first);
  }
  for (const WaitKey& key : keys) Unpark(key);
}

void PlacementGroupService::OnCreate(Connection& conn, proto::Envelope::Reader msg) {
  auto spec = msg.getCreatePlacementGroup();
  std::string id = StringOf(spec.getGroupId());
  if (absl::Status refused =
          manager_.CheckCreate(id, spec.getName().size(), spec.getBundles().size());
      !refused.ok()) {
    // Refused before its bundles are decoded.
    ReplyRemoved(conn, msg.getRequestId(), id, std::string(refused.message()));
    return;
  }
  std::vector<std::map<std::string, double>> bundles;
  for (auto b : spec.getBundles()) bundles.push_back(ReadResources(b.getResources()));
  auto created = manager_.Create(id, spec.getName().cStr(),
                                 static_cast<scheduler::PlacementStrategy>(spec.getStrategy()),
                                 std::move(bundles));
  if (!created.ok()) {
    ReplyRemoved(conn, msg.getRequestId(), id, std::string(created.status().message()));
    return;
  }
  Record(**created);
  ReplyState(conn, msg.getRequestId(), *created);
  Schedule();
}

void PlacementGroupService::OnWait(Connection& conn, proto::Envelope::Reader msg) {
  auto wait = msg.getWaitPlacementGroup();
  const uint64_t request_id = msg.getRequestId();
  std::string id = StringOf(wait.getGroupId());
  const PlacementGroup* g = manager_.Find(id);
  if (g == nullptr) {
    ReplyRemoved(conn, request_id, id, "no such placement group");
    return;
  }
  if (g->state == GroupState::kCreated || g->state == GroupState::kRemoved ||
      wait.getTimeoutMs() == 0) {
    ReplyState(conn, request_id, g);
    return;
  }
  WaitKey key{conn.id(), request_id};
  if (parked_.contains(key)) Unpark(key);  // a repeated request id replaces its wait
  auto count = parked_per_connection_.find(conn.id());
  if (count != parked_per_connection_.end() &&
      count->second >= options_.limits.max_parked_requests_per_connection) {
    // Enough parked for this client: answer now with the current state.
    ReplyState(conn, request_id, g);
    return;
  }
  ++parked_per_connection_[conn.id()];
  auto timer = std::make_unique<boost::asio::steady_timer>(
      *options_.io, CappedWireTimeout(wait.getTimeoutMs(), options_.max_wait));
  timer->async_wait([this, key](const boost::system::error_code& ec) {
    if (ec) return;  // answered or dropped: the timer was destroyed
    auto it = parked_.find(key);
    if (it == parked_.end()) return;
    std::string group_id = it->second.group_id;
    Unpark(key);
    if (Connection* c = options_.find_connection(key.first)) {
      ReplyState(*c, key.second, manager_.Find(group_id));
    }
  });
  parked_[key] = ParkedWait{id, std::move(timer)};
  waits_by_group_[id].insert(key);
}

void PlacementGroupService::OnRemove(Connection& conn, proto::Envelope::Reader msg) {
  manager_.Remove(StringOf(msg.getRemovePlacementGroup()));
  SendAck(conn, msg.getRequestId());
}

void PlacementGroupService::OnList(Connection& conn, uint64_t request_id) {
  SendReply(conn, request_id, [&](proto::Envelope::Builder env) { FillList(env); });
}

void PlacementGroupService::FillList(proto::Envelope::Builder env) const {
  const auto& groups = manager_.groups();
  auto list = env.initPlacementGroups(groups.size());
  size_t i = 0;
  for (const auto& [id, g] : groups) FillState(list[i++], g);
}

void PlacementGroupService::OnEvent(const PlacementGroup& g, scheduler::GroupEvent event) {
  Record(g);
  switch (event) {
    case scheduler::GroupEvent::kCreated:
      AnswerWaits(g);
      AtTurnEnd(/*schedule=*/true);  // the view changed; the next groups may go now
      return;
    case scheduler::GroupEvent::kRemoved:
      removed_.Append(g.id);
      AnswerWaits(g);
      AtTurnEnd(/*schedule=*/false);
      return;
    case scheduler::GroupEvent::kRolledBack:
      // Tried again at the next report; a node death that caused it
      // broadcasts the view itself.
      return;
  }
}

void PlacementGroupService::AtTurnEnd(bool schedule) {
  if (options_.on_view_changed && !view_due_) {
    // One view per node for the groups created or removed within the
    // window, not one per group: each view lists every committed bundle.
    // A lease for a group a node does not know yet waits for it (parks).
    view_due_ = true;
    view_timer_.expires_after(options_.view_coalesce);
    view_timer_.async_wait([this](const boost::system::error_code& ec) {
      if (ec) return;  // the service is going away
      view_due_ = false;
      options_.on_view_changed();
    });
  }
  if (!schedule || schedule_posted_) return;
  schedule_posted_ = true;
  // The groups the replies of one read created free one Schedule, not one each.
  lumen::Post(*options_.io, "head.placement_groups_schedule", [this] {
    schedule_posted_ = false;
    Schedule();
  });
}

void PlacementGroupService::Record(const PlacementGroup& g) {
  if (options_.recorder == nullptr || !options_.recorder->enabled()) return;
  if (g.state == GroupState::kRemoved) {
    options_.recorder->Delete(HeadTable::kPlacementGroups, g.id);
    return;
  }
  capnp::MallocMessageBuilder message;
  FillState(message.initRoot<proto::PlacementGroupState>(), g);
  auto words = capnp::messageToFlatArray(message);
  auto bytes = words.asBytes();
  options_.recorder->Put(HeadTable::kPlacementGroups, g.id,
                         std::string(reinterpret_cast<const char*>(bytes.begin()), bytes.size()));
}

bool PlacementGroupService::Restore(const std::string& value) {
  thread_.Check("PlacementGroupService");
  if (value.empty() || value.size() % sizeof(capnp::word) != 0) return false;
  std::vector<capnp::word> words(value.size() / sizeof(capnp::word));
  std::memcpy(words.data(), value.data(), value.size());
  try {
    capnp::FlatArrayMessageReader reader(kj::arrayPtr(words.data(), words.size()));
    auto state = reader.getRoot<proto::PlacementGroupState>();
    PlacementGroup g;
    g.id = StringOf(state.getGroupId());
    g.name = state.getName().cStr();
    g.strategy = static_cast<scheduler::PlacementStrategy>(state.getStrategy());
    g.state = std::string_view(state.getState().cStr()) == scheduler::GroupStateName(GroupState::kCreated)
                  ? GroupState::kCreated
                  : GroupState::kPending;
    for (auto b : state.getBundles()) {
      g.bundles.push_back(ReadResources(b.getResources()));
      if (b.hasNodeId()) g.nodes.push_back(StringOf(b.getNodeId()));
    }
    if (g.nodes.size() != g.bundles.size()) {
      g.nodes.clear();
      g.state = GroupState::kPending;
    }
    return manager_.Restore(std::move(g)).ok();
  } catch (const kj::Exception&) {
    return false;
  }
}

void PlacementGroupService::AnswerWaits(const PlacementGroup& g) {
  auto it = waits_by_group_.find(g.id);
  if (it == waits_by_group_.end()) return;
  std::set<WaitKey> keys = it->second;
  for (const WaitKey& key : keys) {
    Unpark(key);
    if (Connection* c = options_.find_connection(key.first)) ReplyState(*c, key.second, &g);
  }
}

void PlacementGroupService::Unpark(const WaitKey& key) {
  auto it = parked_.find(key);
  if (it == parked_.end()) return;
  auto git = waits_by_group_.find(it->second.group_id);
  if (git != waits_by_group_.end()) {
    git->second.erase(key);
    if (git->second.empty()) waits_by_group_.erase(git);
  }
  auto count = parked_per_connection_.find(key.first);
  if (count != parked_per_connection_.end() && --count->second == 0) {
    parked_per_connection_.erase(count);
  }
  parked_.erase(it);  // destroys the timer, cancelling it
}

void PlacementGroupService::ReplyState(Connection& conn, uint64_t request_id,
                                       const PlacementGroup* g) {
  if (g == nullptr) return ReplyRemoved(conn, request_id, "", "no such placement group");
  SendReply(conn, request_id,
            [&](proto::Envelope::Builder env) { FillState(env.initPlacementGroupState(), *g); });
}

void PlacementGroupService::ReplyRemoved(Connection& conn, uint64_t request_id,
                                         const std::string& group_id, const std::string& error) {
  PlacementGroup removed;
  removed.id = group_id;
  removed.state = GroupState::kRemoved;
  removed.error = error;
  ReplyState(conn, request_id, &removed);
}

}  // namespace lumen::head
