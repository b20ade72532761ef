// PlacementGroupManager's two-phase commit (and the one step of a group on
// one node alone), driven deterministically: a fake
// BundleTransport stands for the nodes. A node acts on a request when it is
// sent (it reserves a prepared bundle, releases a cancelled one) and its reply
// (a cancel's acknowledgement too) is held until the test delivers it, drops
// it, or declares the node dead.
// No processes, no sockets, no clock.
#include "lumen/scheduler/placement_group_manager.h"

#include <map>
#include <set>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

namespace lumen::scheduler {
namespace {

using Bundles = std::vector<std::map<std::string, double>>;

class FakeNodes : public BundleTransport {
 public:
  absl::Status Send(const BundleRequest& request) override {
    sent.push_back(request);
    if (unreachable.contains(request.node_id)) return absl::UnavailableError("a chosen node is gone");
    if (auto first = answered.find(request.ticket); first != answered.end()) {
      // A resend (the ticket is the key): answered as the first time, not acted on.
      ++replayed;
      replies.push_back(first->second);
      return absl::OkStatus();
    }
    std::set<std::string>& held = reserved[request.node_id];
    bool ok = !refusing.contains(request.node_id);
    for (const IndexedBundle& b : request.bundles) {
      std::string key = request.group_id + "/" + std::to_string(b.index);
      const bool reserves =
          request.phase == BundlePhase::kPrepare || request.phase == BundlePhase::kPrepareCommit;
      if (reserves && ok) held.insert(key);
      if (request.phase == BundlePhase::kCancel) held.erase(key);
    }
    // A cancel is acknowledged too (kept by the manager until then).
    replies.push_back({request.ticket, request.node_id, request.phase,
                       ok || request.phase == BundlePhase::kCancel
                           ? absl::OkStatus()
                           : absl::UnavailableError("refused by " + request.node_id)});
    answered.emplace(request.ticket, replies.back());
    return absl::OkStatus();
  }

  struct Reply {
    uint64_t ticket;
    std::string node;
    BundlePhase phase;
    absl::Status status;
  };

  // Delivers every held reply of `phase` (from `node` only, when given).
  void Deliver(PlacementGroupManager& m, BundlePhase phase, const std::string& node = "") {
    std::vector<Reply> now;
    std::erase_if(replies, [&](const Reply& r) {
      if (r.phase != phase || (!node.empty() && r.node != node)) return false;
      now.push_back(r);
      return true;
    });
    for (const Reply& r : now) m.OnBundleReply(r.ticket, r.status);
  }
  // Forgets the held replies from `node` (lost with its connection).
  void Drop(const std::string& node) {
    std::erase_if(replies, [&](const Reply& r) { return r.node == node; });
  }

  size_t Count(BundlePhase phase) const {
    size_t n = 0;
    for (const auto& r : sent) n += r.phase == phase ? 1 : 0;
    return n;
  }
  size_t ReservedBundles() const {
    size_t n = 0;
    for (const auto& [node, keys] : reserved) n += keys.size();
    return n;
  }

  std::vector<BundleRequest> sent;
  std::vector<Reply> replies;
  std::map<std::string, std::set<std::string>> reserved;  // node -> "group/index"
  std::set<std::string> refusing;
  std::set<std::string> unreachable;
  std::map<uint64_t, Reply> answered;  // ticket -> the node's first answer
  size_t replayed = 0;                 // resends answered from `answered`
};

ResourceSet Make(const std::map<std::string, double>& m) {
  auto set = ResourceSet::FromMap(m);
  REQUIRE(set.ok());
  return *set;
}

ClusterResourceView Nodes(std::vector<std::string> alive, double cpus = 4,
                          std::vector<std::string> dead = {}) {
  ClusterResourceView view;
  for (const auto& id : alive) view.Upsert(id, {Make({{"CPU", cpus}}), Make({{"CPU", cpus}}), true});
  for (const auto& id : dead) view.Upsert(id, {Make({{"CPU", cpus}}), Make({{"CPU", cpus}}), false});
  return view;
}

struct Fixture {
  // `in_flight`: max_attempts_in_flight (1: one group's two phases at a time,
  // as the protocol tests below step through). `one_step`: one_step_single_node.
  explicit Fixture(size_t in_flight = 1, bool one_step = true)
      : manager{{.limits = {.max_groups = 10, .max_bundles_per_group = 8, .max_name_bytes = 16,
                            .removed_groups_kept = 2, .max_attempts_in_flight = in_flight,
                            .one_step_single_node = one_step},
                 .transport = &nodes,
                 .on_event = [this](const PlacementGroup& g, GroupEvent e) {
                   events.emplace_back(g.id, e);
                 }}} {}
  FakeNodes nodes;
  std::vector<std::pair<std::string, GroupEvent>> events;
  PlacementGroupManager manager;

  const PlacementGroup& Create(const std::string& id, Bundles bundles,
                               PlacementStrategy strategy = PlacementStrategy::kStrictSpread) {
    auto g = manager.Create(id, "pg-" + id, strategy, std::move(bundles));
    REQUIRE(g.ok());
    return **g;
  }
  GroupState State(const std::string& id) {
    const PlacementGroup* g = manager.Find(id);
    REQUIRE(g != nullptr);
    return g->state;
  }
};

Bundles Cpus(int count, double each = 1) { return Bundles(count, {{"CPU", each}}); }

TEST_CASE("A group is created once every node prepared and then committed") {
  // Invariant: a group is kCreated only after every node answered both phases
  // positively, and commit is sent only after every prepare succeeded.
  Fixture f;
  f.Create("g", Cpus(3));
  f.manager.Schedule(Nodes({"a", "b", "c"}));
  CHECK(f.State("g") == GroupState::kPreparing);
  CHECK(f.nodes.Count(BundlePhase::kPrepare) == 3);

  f.nodes.Deliver(f.manager, BundlePhase::kPrepare, "a");
  f.nodes.Deliver(f.manager, BundlePhase::kPrepare, "b");
  CHECK(f.nodes.Count(BundlePhase::kCommit) == 0);  // c has not answered yet
  f.nodes.Deliver(f.manager, BundlePhase::kPrepare, "c");
  CHECK(f.State("g") == GroupState::kCommitting);
  CHECK(f.nodes.Count(BundlePhase::kCommit) == 3);

  f.nodes.Deliver(f.manager, BundlePhase::kCommit);
  CHECK(f.State("g") == GroupState::kCreated);
  CHECK(f.nodes.ReservedBundles() == 3);
  REQUIRE(f.events.size() == 1);
  CHECK(f.events[0].second == GroupEvent::kCreated);
  CHECK(GroupStateName(GroupState::kCommitting) == "PREPARING");
}

TEST_CASE("A prepare refused by one node rolls back the others") {
  // Invariant: after a refused prepare, no node holds any bundle of the group
  // (every node of the attempt got a cancel, also those whose prepare reply
  // is still in flight), the group is kPending with the node's reason, and a
  // late positive reply of the abandoned attempt starts no commit.
  Fixture f;
  f.nodes.refusing.insert("b");
  f.Create("g", Cpus(3));
  f.manager.Schedule(Nodes({"a", "b", "c"}));
  CHECK(f.nodes.ReservedBundles() == 2);  // a and c reserved on receipt

  f.nodes.Deliver(f.manager, BundlePhase::kPrepare, "a");
  f.nodes.Deliver(f.manager, BundlePhase::kPrepare, "b");  // the refusal
  CHECK(f.State("g") == GroupState::kPending);
  CHECK(f.manager.Find("g")->error == "refused by b");
  CHECK(f.nodes.Count(BundlePhase::kCancel) == 3);
  CHECK(f.nodes.ReservedBundles() == 0);
  CHECK(f.manager.rollbacks() == 1);

  f.nodes.Deliver(f.manager, BundlePhase::kPrepare, "c");  // late, of the old attempt
  CHECK(f.nodes.Count(BundlePhase::kCommit) == 0);
  CHECK(f.State("g") == GroupState::kPending);

  // The next schedule tries again; this time b accepts.
  f.nodes.refusing.clear();
  f.manager.Schedule(Nodes({"a", "b", "c"}));
  f.nodes.Deliver(f.manager, BundlePhase::kPrepare);
  f.nodes.Deliver(f.manager, BundlePhase::kCommit);
  CHECK(f.State("g") == GroupState::kCreated);
  CHECK(f.nodes.ReservedBundles() == 3);
}

TEST_CASE("A group that can never fit is infeasible, and placed when a node can hold it") {
  // Invariant: a group is kInfeasible exactly while the alive nodes' totals
  // cannot hold it, and nothing is sent to any node for it meanwhile.
  Fixture f;
  f.Create("g", Cpus(3));  // STRICT_SPREAD over three nodes
  f.manager.Schedule(Nodes({"a", "b"}));
  CHECK(f.State("g") == GroupState::kInfeasible);
  CHECK_FALSE(f.manager.Find("g")->error.empty());
  CHECK(f.nodes.sent.empty());

  f.Create("big", {{{"CPU", 8}}}, PlacementStrategy::kPack);
  f.manager.Schedule(Nodes({"a", "b", "c"}, /*cpus=*/4));
  CHECK(f.State("g") == GroupState::kPreparing);  // the oldest goes first
  CHECK(f.State("big") == GroupState::kPending);   // one attempt at a time
}

TEST_CASE("A node that dies while its commit reply is outstanding rolls the group back") {
  // Invariant: a commit reply that never comes (the node died, its connection
  // with it) does not leave the group half-created: the committed bundles on
  // the surviving nodes are cancelled, the group is kPending, and it is placed
  // again on the alive nodes.
  Fixture f;
  f.Create("g", Cpus(2));
  f.manager.Schedule(Nodes({"a", "b"}));
  f.nodes.Deliver(f.manager, BundlePhase::kPrepare);
  REQUIRE(f.State("g") == GroupState::kCommitting);
  f.nodes.Deliver(f.manager, BundlePhase::kCommit, "a");
  f.nodes.Drop("b");  // b's commit reply is lost with b
  CHECK(f.State("g") == GroupState::kCommitting);

  f.manager.OnNodeDead("b");
  CHECK(f.State("g") == GroupState::kPending);
  CHECK(f.manager.Find("g")->error == "the node died");
  CHECK(f.nodes.reserved["a"].empty());
  REQUIRE(f.events.size() == 1);
  CHECK(f.events[0].second == GroupEvent::kRolledBack);

  // Placed again on the nodes left (c joined meanwhile).
  f.manager.Schedule(Nodes({"a", "c"}, 4, /*dead=*/{"b"}));
  f.nodes.Deliver(f.manager, BundlePhase::kPrepare);
  f.nodes.Deliver(f.manager, BundlePhase::kCommit);
  CHECK(f.State("g") == GroupState::kCreated);
  const auto& nodes = f.manager.Find("g")->nodes;
  CHECK(std::set<std::string>(nodes.begin(), nodes.end()) == std::set<std::string>{"a", "c"});
}

TEST_CASE("A created group that loses a node goes back to pending and releases the rest") {
  // Invariant: a created group never stays kCreated with a bundle on a dead
  // node; its bundles on the other nodes are released.
  Fixture f;
  f.Create("g", Cpus(2));
  f.manager.Schedule(Nodes({"a", "b"}));
  f.nodes.Deliver(f.manager, BundlePhase::kPrepare);
  f.nodes.Deliver(f.manager, BundlePhase::kCommit);
  REQUIRE(f.State("g") == GroupState::kCreated);

  f.manager.OnNodeDead("a");
  CHECK(f.State("g") == GroupState::kPending);
  CHECK(f.manager.Find("g")->error == "a node holding one of its bundles died");
  CHECK(f.nodes.reserved["b"].empty());
}

TEST_CASE("Removing a group while it prepares cancels it everywhere") {
  // Invariant: a group removed during its prepare phase ends kRemoved with no
  // bundle held anywhere; the late prepare replies start no commit, and the
  // next group may be placed at once.
  Fixture f;
  f.Create("g", Cpus(2));
  f.Create("next", Cpus(1));
  f.manager.Schedule(Nodes({"a", "b"}));
  REQUIRE(f.State("g") == GroupState::kPreparing);
  f.nodes.Deliver(f.manager, BundlePhase::kPrepare, "a");

  CHECK(f.manager.Remove("g"));
  CHECK(f.State("g") == GroupState::kRemoved);
  CHECK(f.nodes.ReservedBundles() == 0);
  CHECK(f.manager.live_groups() == 1);
  REQUIRE(f.events.size() == 1);
  CHECK(f.events[0].second == GroupEvent::kRemoved);

  f.nodes.Deliver(f.manager, BundlePhase::kPrepare, "b");  // late
  CHECK(f.nodes.Count(BundlePhase::kCommit) == 0);
  CHECK(f.State("g") == GroupState::kRemoved);
  CHECK_FALSE(f.manager.Remove("g"));  // once

  f.manager.Schedule(Nodes({"a", "b"}));
  CHECK(f.State("next") == GroupState::kPreparing);
}

TEST_CASE("A node that cannot be reached at prepare time rolls the attempt back at once") {
  // Invariant: an unreachable node is a refusal: nothing stays reserved and
  // no attempt is left under way (the next Schedule can try again).
  Fixture f;
  f.nodes.unreachable.insert("b");
  f.Create("g", Cpus(2));
  f.manager.Schedule(Nodes({"a", "b"}));
  CHECK(f.State("g") == GroupState::kPending);
  CHECK(f.manager.Find("g")->error == "a chosen node is gone");
  CHECK(f.nodes.ReservedBundles() == 0);

  f.nodes.unreachable.clear();
  f.manager.Schedule(Nodes({"a", "b"}));
  CHECK(f.State("g") == GroupState::kPreparing);
}

TEST_CASE("A cancel a disconnected node misses is sent when it registers again, dropped when it "
          "dies") {
  // Invariant (reliability item 8): removing a group while a node holding one
  // of its bundles is disconnected (alive, its link reset: the transport says
  // Unavailable) leaves nothing of it reserved once that node registers
  // again: the cancel waits for it and goes then, once; a node declared dead
  // instead gets none (its bundles went with it). Other groups keep theirs.
  Fixture f;
  f.Create("g", Cpus(2));
  f.Create("h", Cpus(2));
  for (int i = 0; i < 2; ++i) {
    f.manager.Schedule(Nodes({"a", "b"}));
    f.nodes.Deliver(f.manager, BundlePhase::kPrepare);
    f.nodes.Deliver(f.manager, BundlePhase::kCommit);
  }
  REQUIRE(f.State("g") == GroupState::kCreated);
  REQUIRE(f.State("h") == GroupState::kCreated);
  REQUIRE(f.nodes.reserved["b"].size() == 2);

  f.nodes.unreachable.insert("b");  // disconnected, not dead
  CHECK(f.manager.Remove("g"));
  auto only_h = [&](const std::string& node) {
    const auto& held = f.nodes.reserved[node];
    return held.size() == 1 && held.begin()->rfind("h/", 0) == 0;
  };
  CHECK(only_h("a"));
  CHECK(f.nodes.reserved["b"].size() == 2);  // g's bundle there is still held
  CHECK(f.manager.pending_cancels() == 1);
  f.manager.OnNodeReconnected("b");          // still unreachable: it keeps waiting
  CHECK(f.manager.pending_cancels() == 1);

  f.nodes.unreachable.clear();
  const size_t cancels = f.nodes.Count(BundlePhase::kCancel);
  f.manager.OnNodeReconnected("b");
  CHECK(f.manager.pending_cancels() == 0);
  CHECK(f.nodes.Count(BundlePhase::kCancel) == cancels + 1);
  CHECK(only_h("b"));
  f.nodes.Deliver(f.manager, BundlePhase::kCancel);  // acknowledged
  CHECK(f.manager.unacknowledged_cancels() == 0);
  f.manager.OnNodeReconnected("b");  // nothing more to send
  CHECK(f.nodes.Count(BundlePhase::kCancel) == cancels + 1);

  f.nodes.unreachable.insert("a");
  CHECK(f.manager.Remove("h"));
  CHECK(f.manager.pending_cancels() == 1);
  f.manager.OnNodeDead("a");
  CHECK(f.manager.pending_cancels() == 0);
  CHECK(f.nodes.reserved["b"].empty());
}

TEST_CASE("A cancel written to a connection that dies before the node acts is sent again when the "
          "node registers again, with the same ticket, until acknowledged") {
  // Invariant (reliability items 8 and 9): a cancel the transport accepted
  // (written to the node's connection) is kept until the node acknowledges
  // it; when the connection died first (the node never acted, or acted and
  // its acknowledgement was lost) the node registering again gets it again,
  // under the same ticket (the node's de-duplication key), so nothing of the
  // group stays reserved; an acknowledged cancel is never sent again, and a
  // node declared dead gets none.
  Fixture f;
  f.Create("g", Cpus(2));
  f.manager.Schedule(Nodes({"a", "b"}));
  f.nodes.Deliver(f.manager, BundlePhase::kPrepare);
  f.nodes.Deliver(f.manager, BundlePhase::kCommit);
  REQUIRE(f.State("g") == GroupState::kCreated);

  // b's connection dies with the cancel in it: b never acts on it.
  std::set<std::string> held_b = f.nodes.reserved["b"];
  REQUIRE(held_b.size() == 1);
  CHECK(f.manager.Remove("g"));
  f.nodes.reserved["b"] = held_b;  // undo what the fake did: the cancel was lost
  std::erase_if(f.nodes.answered, [](const auto& e) { return e.second.node == "b"; });
  f.nodes.Drop("b");
  f.nodes.Deliver(f.manager, BundlePhase::kCancel);  // a's acknowledgement
  CHECK(f.nodes.reserved["a"].empty());
  CHECK(f.manager.unacknowledged_cancels() == 1);
  CHECK(f.manager.pending_cancels() == 0);  // it was sent, just not acknowledged

  auto cancels_to_b = [&] {
    std::vector<uint64_t> tickets;
    for (const auto& r : f.nodes.sent) {
      if (r.phase == BundlePhase::kCancel && r.node_id == "b") tickets.push_back(r.ticket);
    }
    return tickets;
  };
  REQUIRE(cancels_to_b().size() == 1);
  f.manager.OnNodeReconnected("b");
  auto tickets = cancels_to_b();
  REQUIRE(tickets.size() == 2);
  CHECK(tickets[1] == tickets[0]);  // the same key: a node that did act answers from its table
  CHECK(f.nodes.reserved["b"].empty());
  // Its acknowledgement lost too: sent once more at the next registration.
  f.nodes.Drop("b");
  f.manager.OnNodeReconnected("b");
  CHECK(cancels_to_b().size() == 3);
  f.nodes.Deliver(f.manager, BundlePhase::kCancel);
  CHECK(f.manager.unacknowledged_cancels() == 0);
  f.manager.OnNodeReconnected("b");
  CHECK(cancels_to_b().size() == 3);

  // Unacknowledged when the node dies: dropped, never sent again.
  f.Create("h", Cpus(2));
  f.manager.Schedule(Nodes({"a", "b"}));
  f.nodes.Deliver(f.manager, BundlePhase::kPrepare);
  f.nodes.Deliver(f.manager, BundlePhase::kCommit);
  REQUIRE(f.State("h") == GroupState::kCreated);
  CHECK(f.manager.Remove("h"));
  f.nodes.Drop("b");
  f.nodes.Deliver(f.manager, BundlePhase::kCancel);
  CHECK(f.manager.unacknowledged_cancels() == 1);
  f.manager.OnNodeDead("b");
  CHECK(f.manager.unacknowledged_cancels() == 0);
  const size_t before = cancels_to_b().size();
  f.manager.OnNodeReconnected("b");
  CHECK(cancels_to_b().size() == before);
}

TEST_CASE("A prepare or commit whose reply is lost with the node's link is sent again under its "
          "ticket when the node registers again, and the group is created without a rollback") {
  // Invariant (reliability items 8 and 9): a node whose link was reset after
  // it acted on a prepare or a commit (its reply lost) gets the same request
  // again, same ticket (its de-duplication key), when it registers again; it
  // answers from its table without acting twice, and the group is created
  // with no rollback, no cancel, each bundle reserved once. A commit for a
  // node disconnected at that moment waits the same way. Only a death rolls
  // back.
  Fixture f;
  f.Create("g", Cpus(2));
  f.manager.Schedule(Nodes({"a", "b"}));
  auto last_to_b = [&](BundlePhase phase) {
    const BundleRequest* last = nullptr;
    size_t n = 0;
    for (const auto& r : f.nodes.sent) {
      if (r.node_id != "b" || r.phase != phase) continue;
      last = &r;
      ++n;
    }
    REQUIRE(last != nullptr);
    return std::make_pair(last->ticket, n);
  };
  const auto [prepare_ticket, prepares] = last_to_b(BundlePhase::kPrepare);
  CHECK(prepares == 1);
  f.nodes.Deliver(f.manager, BundlePhase::kPrepare, "a");
  f.nodes.Drop("b");  // b prepared; its reply is lost with its link
  CHECK(f.nodes.reserved["b"].size() == 1);

  f.manager.OnNodeReconnected("b");
  CHECK(f.State("g") == GroupState::kPreparing);
  CHECK(last_to_b(BundlePhase::kPrepare) == std::make_pair(prepare_ticket, size_t{2}));
  CHECK(f.nodes.replayed == 1);
  CHECK(f.manager.resent_phases() == 1);
  f.nodes.Deliver(f.manager, BundlePhase::kPrepare);
  REQUIRE(f.State("g") == GroupState::kCommitting);

  const uint64_t commit_ticket = last_to_b(BundlePhase::kCommit).first;
  f.nodes.Deliver(f.manager, BundlePhase::kCommit, "a");
  f.nodes.Drop("b");  // b committed; the reply is lost again
  f.manager.OnNodeReconnected("b");
  CHECK(last_to_b(BundlePhase::kCommit) == std::make_pair(commit_ticket, size_t{2}));
  f.nodes.Deliver(f.manager, BundlePhase::kCommit);
  CHECK(f.State("g") == GroupState::kCreated);
  CHECK(f.nodes.replayed == 2);
  CHECK(f.manager.rollbacks() == 0);
  CHECK(f.nodes.Count(BundlePhase::kCancel) == 0);
  CHECK(f.nodes.ReservedBundles() == 2);
  REQUIRE(f.events.size() == 1);
  CHECK(f.events[0].second == GroupEvent::kCreated);
  f.manager.OnNodeReconnected("b");  // nothing outstanding: nothing sent
  CHECK(f.manager.resent_phases() == 2);

  // b disconnected when h's commit goes: it waits for b, then goes once.
  f.Create("h", Cpus(2));
  f.manager.Schedule(Nodes({"a", "b"}));
  f.nodes.unreachable.insert("b");
  f.nodes.Deliver(f.manager, BundlePhase::kPrepare);
  CHECK(f.State("h") == GroupState::kCommitting);
  f.nodes.Deliver(f.manager, BundlePhase::kCommit);  // a's
  CHECK(f.State("h") == GroupState::kCommitting);
  f.manager.OnNodeReconnected("b");  // registered, and lost again at once
  CHECK(f.State("h") == GroupState::kCommitting);
  f.nodes.unreachable.clear();
  f.manager.OnNodeReconnected("b");
  f.nodes.Deliver(f.manager, BundlePhase::kCommit);
  CHECK(f.State("h") == GroupState::kCreated);
  CHECK(f.manager.rollbacks() == 0);
  CHECK(f.nodes.ReservedBundles() == 4);

  // Only a death rolls back: i's commit outstanding on b when b dies.
  f.Create("i", Cpus(2));
  f.manager.Schedule(Nodes({"a", "b"}, 8));
  f.nodes.Deliver(f.manager, BundlePhase::kPrepare);
  f.nodes.Deliver(f.manager, BundlePhase::kCommit, "a");
  f.nodes.Drop("b");
  f.manager.OnNodeDead("b");
  CHECK(f.State("i") == GroupState::kPending);
  CHECK(f.manager.rollbacks() == 3);  // i's attempt, and g and h (created, a bundle on b)
}

TEST_CASE("A group on one node alone is prepared and committed in one request") {
  // Invariant: a group whose bundles all go to one node costs one request to
  // that node (kPrepareCommit: it reserves and commits all or none) and one
  // reply, after which it is kCreated; a refusal rolls it back with nothing
  // reserved; a reply lost with the node's link is resent under the same
  // ticket when the node registers again and the group is created once, no
  // rollback; a death rolls it back. With one_step_single_node off the same
  // group goes through both phases. Groups over several nodes always do
  // (the tests above).
  Fixture f;
  f.Create("g", Cpus(2), PlacementStrategy::kPack);  // both bundles on one node
  f.manager.Schedule(Nodes({"a", "b"}));
  CHECK(f.State("g") == GroupState::kPreparing);
  REQUIRE(f.nodes.sent.size() == 1);
  CHECK(f.nodes.sent[0].phase == BundlePhase::kPrepareCommit);
  CHECK(f.nodes.sent[0].bundles.size() == 2);
  f.nodes.Deliver(f.manager, BundlePhase::kPrepareCommit);
  CHECK(f.State("g") == GroupState::kCreated);
  CHECK(f.nodes.sent.size() == 1);  // no commit after it
  CHECK(f.nodes.ReservedBundles() == 2);
  REQUIRE(f.events.size() == 1);
  CHECK(f.events[0].second == GroupEvent::kCreated);
  CHECK(std::string(BundlePhaseName(BundlePhase::kPrepareCommit)) == "PREPARE_COMMIT");

  // Refused: rolled back, nothing of it reserved, pending again.
  f.nodes.refusing.insert("a");
  f.nodes.refusing.insert("b");
  f.Create("h", Cpus(1), PlacementStrategy::kPack);
  f.manager.Schedule(Nodes({"a", "b"}));
  f.nodes.Deliver(f.manager, BundlePhase::kPrepareCommit);
  CHECK(f.State("h") == GroupState::kPending);
  CHECK(f.manager.rollbacks() == 1);
  CHECK(f.nodes.ReservedBundles() == 2);  // g's only
  f.nodes.Deliver(f.manager, BundlePhase::kCancel);  // the rollback's, acknowledged
  CHECK(f.manager.unacknowledged_cancels() == 0);
  f.nodes.refusing.clear();

  // Its reply lost with the node's link: the same ticket again, answered
  // from the node's table, created once.
  f.manager.Schedule(Nodes({"a", "b"}));
  REQUIRE(f.State("h") == GroupState::kPreparing);
  const BundleRequest first = f.nodes.sent.back();
  CHECK(first.phase == BundlePhase::kPrepareCommit);
  f.nodes.Drop(first.node_id);
  f.manager.OnNodeReconnected(first.node_id);
  CHECK(f.nodes.sent.back().ticket == first.ticket);
  CHECK(f.nodes.sent.back().phase == BundlePhase::kPrepareCommit);
  CHECK(f.nodes.replayed == 1);
  f.nodes.Deliver(f.manager, BundlePhase::kPrepareCommit);
  CHECK(f.State("h") == GroupState::kCreated);
  CHECK(f.manager.rollbacks() == 1);
  CHECK(f.nodes.ReservedBundles() == 3);

  // Its node dies while the one step is unanswered: rolled back.
  f.Create("i", Cpus(1), PlacementStrategy::kPack);
  f.manager.Schedule(Nodes({"a", "b"}, 8));
  REQUIRE(f.State("i") == GroupState::kPreparing);
  const std::string i_node = f.manager.Find("i")->nodes[0];
  f.nodes.Drop(i_node);
  f.manager.OnNodeDead(i_node);
  CHECK(f.State("i") == GroupState::kPending);

  // Off: the two phases, as for a group over several nodes.
  Fixture two(/*in_flight=*/1, /*one_step=*/false);
  two.Create("g", Cpus(2), PlacementStrategy::kPack);
  two.manager.Schedule(Nodes({"a", "b"}));
  CHECK(two.nodes.Count(BundlePhase::kPrepare) == 1);
  CHECK(two.nodes.Count(BundlePhase::kPrepareCommit) == 0);
  two.nodes.Deliver(two.manager, BundlePhase::kPrepare);
  CHECK(two.State("g") == GroupState::kCommitting);
  two.nodes.Deliver(two.manager, BundlePhase::kCommit);
  CHECK(two.State("g") == GroupState::kCreated);
}

TEST_CASE("Create checks its limits, is idempotent, and removed groups are remembered up to a bound") {
  // Invariant: the manager holds at most max_groups live groups and at most
  // removed_groups_kept removed ones; a retried create changes nothing.
  Fixture f;
  const PlacementGroup& g = f.Create("g", Cpus(1));
  auto again = f.manager.Create("g", "other", PlacementStrategy::kPack, Cpus(5));
  REQUIRE(again.ok());
  CHECK(*again == &g);
  CHECK((*again)->bundles.size() == 1);

  auto long_name = f.manager.Create("n", std::string(17, 'x'), PlacementStrategy::kPack, Cpus(1));
  CHECK(long_name.status().code() == absl::StatusCode::kInvalidArgument);
  auto too_many = f.manager.Create("m", "m", PlacementStrategy::kPack, Cpus(9));
  CHECK(too_many.status().code() == absl::StatusCode::kInvalidArgument);
  for (int i = 1; i < 10; ++i) f.Create("g" + std::to_string(i), Cpus(1));
  auto over = f.manager.Create("x", "x", PlacementStrategy::kPack, Cpus(1));
  CHECK(over.status().code() == absl::StatusCode::kResourceExhausted);
  CHECK(std::string(over.status().message()).find("LUMEN_MAX_PLACEMENT_GROUPS") != std::string::npos);

  for (int i = 1; i <= 3; ++i) CHECK(f.manager.Remove("g" + std::to_string(i)));
  CHECK(f.manager.Find("g1") == nullptr);  // the oldest removed is forgotten
  CHECK(f.manager.Find("g2") != nullptr);
  CHECK(f.manager.Find("g3") != nullptr);
  CHECK(f.manager.live_groups() == 7);
}

TEST_CASE("Concurrent attempts: one Schedule starts every group that fits, each all or nothing") {
  // Invariant: with several attempts in flight, each group commits only after
  // all of its own nodes prepared; a refusal rolls back that group alone
  // (its other bundles released), and the others are created.
  Fixture f(/*in_flight=*/8);
  f.Create("g1", Cpus(2));  // STRICT_SPREAD: one bundle on each of a and b
  f.Create("g2", Cpus(2));
  f.Create("g3", Cpus(1));
  f.manager.Schedule(Nodes({"a", "b"}));
  CHECK(f.State("g1") == GroupState::kPreparing);
  CHECK(f.State("g2") == GroupState::kPreparing);
  CHECK(f.State("g3") == GroupState::kPreparing);
  CHECK(f.nodes.Count(BundlePhase::kPrepare) == 4);  // g1's and g2's 2 node shares each
  // g3 (one bundle, so one node) is prepared and committed in one step.
  CHECK(f.nodes.Count(BundlePhase::kPrepareCommit) == 1);
  f.nodes.Deliver(f.manager, BundlePhase::kPrepareCommit);
  CHECK(f.State("g3") == GroupState::kCreated);

  // Only a's prepares answered: g1 and g2 wait for b.
  f.nodes.Deliver(f.manager, BundlePhase::kPrepare, "a");
  CHECK(f.nodes.Count(BundlePhase::kCommit) == 0);
  CHECK(f.State("g1") == GroupState::kPreparing);

  // b refuses g2's share only: make b refuse, then deliver b's prepares.
  for (auto& r : f.nodes.replies) {
    if (r.node == "b" && r.phase == BundlePhase::kPrepare) {
      for (const auto& sent : f.nodes.sent) {
        if (sent.ticket == r.ticket && sent.group_id == "g2") r.status = absl::UnavailableError("no");
      }
    }
  }
  f.nodes.Deliver(f.manager, BundlePhase::kPrepare, "b");
  CHECK(f.State("g2") == GroupState::kPending);  // rolled back alone
  CHECK(f.State("g1") == GroupState::kCommitting);
  CHECK(f.State("g3") == GroupState::kCreated);
  f.nodes.Deliver(f.manager, BundlePhase::kCommit);
  CHECK(f.State("g1") == GroupState::kCreated);
  CHECK(f.State("g3") == GroupState::kCreated);
  // Nothing of g2 stays reserved: only g1's two bundles and g3's one.
  CHECK(f.nodes.ReservedBundles() == 3);
  CHECK(f.manager.rollbacks() == 1);
}

TEST_CASE("Concurrent attempts do not count the same free resources twice") {
  // Invariant: a Schedule places a group only where the resources are free
  // once the attempts under way took theirs, even before any report shows
  // them taken: two 3-CPU groups on one 4-CPU node go one after the other.
  Fixture f(/*in_flight=*/8);
  f.Create("x", Cpus(1, 3), PlacementStrategy::kPack);
  f.Create("y", Cpus(1, 3), PlacementStrategy::kPack);
  f.manager.Schedule(Nodes({"a"}));
  CHECK(f.State("x") == GroupState::kPreparing);
  CHECK(f.State("y") == GroupState::kPending);
  f.manager.Schedule(Nodes({"a"}));  // the same report again: x still holds its share
  CHECK(f.State("y") == GroupState::kPending);
  CHECK(f.nodes.Count(BundlePhase::kPrepareCommit) == 1);  // x's one step
}

TEST_CASE("Concurrent attempts: a node that dies during prepare rolls back every attempt on it") {
  // Invariant: every attempt waiting on a reply of a dead node is rolled back
  // and releases its bundles on the other nodes; attempts not on it go on.
  Fixture f(/*in_flight=*/8);
  f.Create("p", Cpus(2));                                // a and b
  f.Create("q", Cpus(2));                                // a and b
  f.Create("r", Cpus(1, 1), PlacementStrategy::kPack);  // one node
  f.manager.Schedule(Nodes({"a", "b"}));
  const std::string r_node = f.manager.Find("r")->nodes[0];
  const std::string dead = r_node == "a" ? "b" : "a";
  f.nodes.Deliver(f.manager, BundlePhase::kPrepare, r_node);  // p's and q's shares there
  f.manager.OnNodeDead(dead);
  f.nodes.Drop(dead);
  f.nodes.reserved.erase(dead);  // its bundles went with it
  CHECK(f.State("p") == GroupState::kPending);
  CHECK(f.State("q") == GroupState::kPending);
  CHECK(f.State("r") == GroupState::kPreparing);  // its one step, on the live node, goes on
  f.nodes.Deliver(f.manager, BundlePhase::kPrepareCommit);
  CHECK(f.State("r") == GroupState::kCreated);
  CHECK(f.nodes.ReservedBundles() == 1);  // r's; p's and q's shares on the live node released
  CHECK(f.manager.rollbacks() == 2);
}

}  // namespace
}  // namespace lumen::scheduler
