// NodeTable's registration and health logic with a manual clock: time is an
// argument of each call, so the test moves it by hand. No processes, no sockets.
#include "core/head/node_table.h"

#include <capnp/message.h>
#include <capnp/serialize.h>

#include <algorithm>

#include <chrono>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "lumen/common/proto_util.h"

namespace lumen::head {
namespace {

using namespace std::chrono_literals;
using Clock = NodeTable::Clock;

// A NodeStats report of `id` with `cpus` CPUs, all free, and `drivers`.
class Report {
 public:
  Report(const NodeId& id, double cpus, std::vector<JobId> drivers = {},
         uint64_t store_used = 0, uint64_t store_capacity = 0) {
    auto stats = message_.initRoot<proto::NodeStats>();
    stats.setStoreUsed(store_used);
    stats.setStoreCapacity(store_capacity);
    stats.setNodeId(DataOf(id));
    stats.setAddress("127.0.0.1:1");
    SetResources(stats.initTotal(1), {{"CPU", cpus}});
    SetResources(stats.initAvailable(1), {{"CPU", cpus}});
    auto list = stats.initDrivers(drivers.size());
    for (size_t i = 0; i < drivers.size(); ++i) list.set(i, DataOf(drivers[i]));
  }
  proto::NodeStats::Reader get() { return message_.getRoot<proto::NodeStats>().asReader(); }

 private:
  capnp::MallocMessageBuilder message_;
};

NodeTable Table() { return NodeTable({.health_check_period = 100ms, .failure_threshold = 5}); }

TEST_CASE("A node is declared dead after missing its reports for the threshold, not before") {
  // Invariant: a node is alive while its last report is at most period x
  // threshold old, and declared dead (once) as soon as it is older.
  NodeTable nodes = Table();
  const Clock::time_point t0{};
  NodeId a = NodeId::Random();
  CHECK(nodes.Report(1, Report(a, 4).get(), t0) == NodeTable::ReportOutcome::kJoined);
  CHECK(nodes.Report(1, Report(a, 4).get(), t0 + 300ms) == NodeTable::ReportOutcome::kUpdated);

  CHECK(nodes.ExpireSilent(t0 + 800ms).empty());  // exactly 500 ms of silence
  CHECK(nodes.Find(a)->alive);
  auto dead = nodes.ExpireSilent(t0 + 801ms);
  REQUIRE(dead.size() == 1);
  CHECK(dead[0].id == a);
  CHECK(dead[0].conn_id == 1);
  CHECK_FALSE(nodes.Find(a)->alive);
  CHECK(nodes.ExpireSilent(t0 + 10s).empty());  // declared once
}

TEST_CASE("A node declared dead may not come back under the same id") {
  // Invariant: once declared dead, an incarnation's reports and registrations
  // are refused and do not revive it.
  NodeTable nodes = Table();
  const Clock::time_point t0{};
  NodeId a = NodeId::Random();
  nodes.Report(1, Report(a, 4).get(), t0);
  REQUIRE(nodes.ExpireSilent(t0 + 1s).size() == 1);
  CHECK(nodes.WasDeclaredDead(a));
  CHECK(nodes.Report(2, Report(a, 4).get(), t0 + 2s) == NodeTable::ReportOutcome::kRefused);
  CHECK_FALSE(nodes.Find(a)->alive);

  NodeId b = NodeId::Random();  // the restarted node, a new incarnation
  CHECK(nodes.Report(2, Report(b, 4).get(), t0 + 2s) == NodeTable::ReportOutcome::kJoined);
  CHECK(nodes.size() == 2);
}

TEST_CASE("Every frame on the connection of a dead incarnation is refused, until it closes") {
  // Invariant (reliability item 5, the node epoch): once a node is declared
  // dead, RefuseIfStale is true for its connection (each refusal counted)
  // and false for the other nodes' connections; a new incarnation on a new
  // connection is accepted; the closed connection's id is forgotten.
  NodeTable nodes = Table();
  const Clock::time_point t0{};
  NodeId a = NodeId::Random(), b = NodeId::Random();
  nodes.Report(1, Report(a, 4).get(), t0);
  nodes.Report(2, Report(b, 4).get(), t0 + 900ms);
  CHECK_FALSE(nodes.RefuseIfStale(1));
  REQUIRE(nodes.ExpireSilent(t0 + 901ms).size() == 1);  // a froze; b reported
  CHECK(nodes.RefuseIfStale(1));
  CHECK(nodes.RefuseIfStale(1));
  CHECK_FALSE(nodes.RefuseIfStale(2));
  CHECK(nodes.stale_refused() == 2);
  // Its queued report, read after it woke up: refused and counted, not revived.
  CHECK(nodes.Report(1, Report(a, 4).get(), t0 + 2s) == NodeTable::ReportOutcome::kRefused);
  CHECK(nodes.stale_refused() == 3);
  CHECK_FALSE(nodes.Find(a)->alive);
  NodeId a2 = NodeId::Random();  // the same machine rejoining as a new node
  CHECK(nodes.Report(3, Report(a2, 4).get(), t0 + 2s) == NodeTable::ReportOutcome::kJoined);
  CHECK_FALSE(nodes.RefuseIfStale(3));
  CHECK(nodes.DropConnection(1, t0 + 2s).empty());  // already dead
  CHECK_FALSE(nodes.RefuseIfStale(1));     // closed: forgotten
}

TEST_CASE("Closing a connection disconnects its nodes, past the grace they die with their drivers") {
  // Invariant (reliability item 8): a closed connection declares nobody dead
  // at once; only the nodes reporting on it are disconnected (alive, no
  // bundles, no free resources shown), and one that does not register again
  // is declared dead once the silence limit (period x threshold) has passed
  // since the close, with the jobs whose drivers were attached to it.
  NodeTable nodes = Table();
  const Clock::time_point t0{};
  NodeId a = NodeId::Random(), b = NodeId::Random();
  JobId job = JobId::Random();
  nodes.Report(1, Report(a, 4, {job}).get(), t0);
  nodes.Report(2, Report(b, 4).get(), t0);

  const uint64_t before = nodes.version();
  auto disconnected = nodes.DropConnection(1, t0 + 300ms);
  REQUIRE(disconnected == std::vector<NodeId>{a});
  CHECK(nodes.version() > before);  // the other nodes see the change
  CHECK(nodes.Find(a)->alive);
  CHECK_FALSE(nodes.Find(a)->connected());
  CHECK(nodes.Find(b)->connected());
  CHECK(nodes.DropConnection(1, t0 + 300ms).empty());
  // No bundles for it, and no free resources for the other nodes to use.
  scheduler::ClusterResourceView view = nodes.ResourceView();
  CHECK_FALSE(view.Find(std::string(a.Binary()))->alive);
  CHECK(view.Find(std::string(b.Binary()))->alive);
  capnp::MallocMessageBuilder out;
  auto list = out.initRoot<proto::Envelope>().initNodes(nodes.size());
  nodes.FillNodes(list);
  for (auto n : list.asReader()) {
    CHECK(n.getAlive());
    CHECK(n.getAvailable().size() == (IdFrom<NodeId>(n.getNodeId()) == a ? 0u : 1u));
  }

  nodes.Report(2, Report(b, 4).get(), t0 + 800ms, /*registering=*/false);
  CHECK(nodes.ExpireSilent(t0 + 800ms).empty());  // exactly the grace since the close
  auto dead = nodes.ExpireSilent(t0 + 801ms);
  REQUIRE(dead.size() == 1);
  CHECK(dead[0].id == a);
  CHECK(dead[0].conn_id == 0);
  CHECK(dead[0].drivers == std::vector<JobId>{job});
  CHECK(nodes.Find(b)->alive);
  CHECK(nodes.declared_dead() == 1);

  CHECK(nodes.Leave(b, /*conn_id=*/7).empty());  // not its connection
  CHECK(nodes.Leave(b, 2).size() == 1);
  CHECK_FALSE(nodes.Find(b)->alive);
}

TEST_CASE("A disconnected node whose daemon is found gone is dead at once, a connected one never") {
  // Invariant: DeclareGone (the head's probe found nothing listening at the
  // node's address) kills a node only while it is disconnected: not one that
  // registered again meanwhile, not one on its connection, not one dead.
  NodeTable nodes = Table();
  const Clock::time_point t0{};
  NodeId a = NodeId::Random(), b = NodeId::Random(), c = NodeId::Random();
  nodes.Report(1, Report(a, 4).get(), t0);
  nodes.Report(2, Report(b, 4).get(), t0);
  nodes.Report(3, Report(c, 4).get(), t0);
  CHECK(nodes.DeclareGone(a).empty());  // connected
  REQUIRE(nodes.DropConnection(1, t0 + 10ms).size() == 1);
  REQUIRE(nodes.DropConnection(2, t0 + 10ms).size() == 1);
  nodes.Report(4, Report(b, 4).get(), t0 + 20ms);  // b is back first
  auto dead = nodes.DeclareGone(a);
  REQUIRE(dead.size() == 1);
  CHECK(dead[0].id == a);
  CHECK_FALSE(nodes.Find(a)->alive);
  CHECK(nodes.DeclareGone(a).empty());  // once
  CHECK(nodes.DeclareGone(b).empty());
  CHECK(nodes.Find(b)->connected());
  CHECK(nodes.Report(5, Report(a, 4).get(), t0 + 30ms) == NodeTable::ReportOutcome::kRefused);
}

TEST_CASE("A node whose connection closed goes on as itself if it registers again within the "
          "grace, and after its death it is refused") {
  // Invariants (reliability item 8, with item 5's epoch): a node that
  // registers again under its id on a new connection within period x
  // threshold of the close is the same node (kRejoined, alive, connected,
  // counted), never declared dead by that gap; a late report on the old
  // connection does not move it back; once a node was declared dead (it came
  // back too late), its registration on any connection is refused, and
  // what its old connection of a dead incarnation still sends is stale.
  NodeTable nodes = Table();
  const Clock::time_point t0{};
  NodeId a = NodeId::Random(), b = NodeId::Random();
  nodes.Report(1, Report(a, 4).get(), t0);
  nodes.Report(2, Report(b, 4).get(), t0);

  // a's link resets; it registers again 450 ms later (inside the 500 ms grace).
  REQUIRE(nodes.DropConnection(1, t0 + 100ms).size() == 1);
  nodes.Report(2, Report(b, 4).get(), t0 + 500ms, false);
  CHECK(nodes.ExpireSilent(t0 + 550ms).empty());
  CHECK(nodes.Report(3, Report(a, 4).get(), t0 + 550ms) == NodeTable::ReportOutcome::kRejoined);
  CHECK(nodes.Find(a)->connected());
  CHECK(nodes.Find(a)->conn_id == 3);
  CHECK(nodes.rejoined() == 1);
  CHECK(nodes.Report(3, Report(a, 4).get(), t0 + 900ms, false) ==
        NodeTable::ReportOutcome::kUpdated);
  nodes.Report(2, Report(b, 4).get(), t0 + 1000ms, false);
  CHECK(nodes.ExpireSilent(t0 + 1300ms).empty());  // its reports count again
  CHECK_FALSE(nodes.WasDeclaredDead(a));

  // A registration on a new connection before the old one's close was seen:
  // the node moves; a late report of the old connection is ignored, and
  // that connection's close later disconnects nobody.
  CHECK(nodes.Report(4, Report(a, 4).get(), t0 + 1300ms) == NodeTable::ReportOutcome::kRejoined);
  CHECK(nodes.Report(3, Report(a, 4).get(), t0 + 1310ms, false) ==
        NodeTable::ReportOutcome::kIgnored);
  CHECK(nodes.Find(a)->conn_id == 4);
  CHECK(nodes.DropConnection(3, t0 + 1320ms).empty());
  CHECK(nodes.Find(a)->connected());

  // b's link closes and it comes back too late: declared dead, refused.
  nodes.Report(2, Report(b, 4).get(), t0 + 1300ms, false);
  REQUIRE(nodes.DropConnection(2, t0 + 1400ms).size() == 1);
  nodes.Report(4, Report(a, 4).get(), t0 + 1900ms, false);
  auto dead = nodes.ExpireSilent(t0 + 1901ms);
  REQUIRE(dead.size() == 1);
  CHECK(dead[0].id == b);
  CHECK(nodes.Report(5, Report(b, 4).get(), t0 + 2s) == NodeTable::ReportOutcome::kRefused);
  CHECK_FALSE(nodes.Find(b)->alive);
  CHECK(nodes.WasDeclaredDead(b));
  CHECK(nodes.stale_refused() == 1);

  // A frozen node (its connection stays open) declared dead: its connection
  // is stale until it closes, and its id is never taken back.
  REQUIRE(nodes.ExpireSilent(t0 + 2500ms).size() == 1);  // a: silent since 1900 ms
  CHECK(nodes.RefuseIfStale(4));
  CHECK(nodes.Report(6, Report(a, 4).get(), t0 + 3s) == NodeTable::ReportOutcome::kRefused);
  CHECK(nodes.DropConnection(4, t0 + 3s).empty());
  CHECK_FALSE(nodes.RefuseIfStale(4));
  CHECK(nodes.rejoined() == 2);
  CHECK(nodes.declared_dead() == 2);
}

TEST_CASE("The node list and the scheduler's view carry the head's verdict") {
  // Invariant: a node declared dead is listed (for `lumen status`) but marked
  // not alive, in the node list and in the view the placement groups use.
  NodeTable nodes = Table();
  const Clock::time_point t0{};
  NodeId a = NodeId::Random(), b = NodeId::Random();
  nodes.Report(1, Report(a, 4).get(), t0);
  nodes.Report(2, Report(b, 2).get(), t0 + 600ms);
  REQUIRE(nodes.ExpireSilent(t0 + 700ms).size() == 1);  // a

  capnp::MallocMessageBuilder out;
  auto list = out.initRoot<proto::Envelope>().initNodes(nodes.size());
  nodes.FillNodes(list);
  int alive = 0;
  for (auto n : list.asReader()) {
    CHECK(std::string(n.getAddress().cStr()) == "127.0.0.1:1");
    alive += n.getAlive() ? 1 : 0;
    CHECK(n.getAlive() == (IdFrom<NodeId>(n.getNodeId()) == b));
  }
  CHECK(alive == 1);

  scheduler::ClusterResourceView view = nodes.ResourceView();
  REQUIRE(view.nodes().size() == 2);
  CHECK_FALSE(view.Find(std::string(a.Binary()))->alive);
  CHECK(view.Find(std::string(b.Binary()))->alive);
}

TEST_CASE("A report whose store use crosses a step is a change other nodes see") {
  // Invariant: the DEFAULT policy on other nodes counts store use, so a
  // report moving it into another 1/kStoreLevels step (in particular across
  // the nearly-full line, 0.8) gives the node a new version; a report that
  // stays within its step does not (no view update for every byte).
  NodeTable nodes = Table();
  const Clock::time_point t0{};
  NodeId a = NodeId::Random();
  const uint64_t cap = 1000;
  nodes.Report(1, Report(a, 4, {}, 0, cap).get(), t0);
  uint64_t v = nodes.version();
  nodes.Report(1, Report(a, 4, {}, 10, cap).get(), t0);  // 0% -> 1%: same step
  CHECK(nodes.version() == v);
  nodes.Report(1, Report(a, 4, {}, 799, cap).get(), t0);  // into step 15
  CHECK(nodes.version() > v);
  v = nodes.version();
  CHECK(nodes.CountChangedSince(v) == 0);
  nodes.Report(1, Report(a, 4, {}, 800, cap).get(), t0);  // nearly full: step 16
  CHECK(nodes.version() > v);
  CHECK(nodes.CountChangedSince(v) == 1);
  v = nodes.version();
  nodes.Report(1, Report(a, 4, {}, 800, cap).get(), t0);
  CHECK(nodes.version() == v);

  CHECK(NodeTable::StoreLevel(0, 0) == -1);
  CHECK(NodeTable::StoreLevel(5, 0) == -1);
  CHECK(NodeTable::StoreLevel(0, cap) == 0);
  CHECK(NodeTable::StoreLevel(799, cap) == 15);
  CHECK(NodeTable::StoreLevel(800, cap) == 16);
  CHECK(NodeTable::StoreLevel(cap, cap) == 20);
  CHECK(NodeTable::StoreLevel(2 * cap, cap) == 20);
  CHECK(NodeTable::StoreLevel(~0ull - 1, ~0ull) == 19);  // no overflow
}

TEST_CASE("A stall of the head itself is excused: late checks do not kill the nodes at once") {
  // Invariant (the 100-node hang, issue 17): when the head's own check runs
  // late, the time it was stalled is not counted against any node, so the
  // nodes whose reports wait unread in its sockets stay alive; a node that is
  // really silent is still declared dead after the threshold of on-time checks.
  NodeTable nodes = Table();  // 100 ms period, threshold 5: 500 ms of silence
  const Clock::time_point t0{};
  std::vector<NodeId> ids;
  for (int i = 0; i < 100; ++i) {
    ids.push_back(NodeId::Random());
    nodes.Report(static_cast<uint64_t>(i + 1), Report(ids.back(), 1).get(), t0);
  }
  // Checks on time at 100 ms and 200 ms; then the head is starved for 2 s and
  // its next check (due at 300 ms) runs at 2300 ms, before it has read the
  // reports sent meanwhile.
  CHECK(nodes.ExpireSilent(t0 + 100ms).empty());
  CHECK(nodes.ExpireSilent(t0 + 200ms).empty());
  nodes.ExcuseSilence(2000ms, t0 + 2300ms);
  CHECK(nodes.ExpireSilent(t0 + 2300ms).empty());
  for (const NodeId& id : ids) CHECK(nodes.Find(id)->alive);

  // The head catches up: every node but the first reports; the first stays
  // silent and dies after 500 ms of the head's own (on-time) checks.
  for (int i = 1; i < 100; ++i) {
    nodes.Report(static_cast<uint64_t>(i + 1), Report(ids[i], 1).get(), t0 + 2310ms);
  }
  CHECK(nodes.ExpireSilent(t0 + 2400ms).empty());
  CHECK(nodes.ExpireSilent(t0 + 2500ms).empty());
  auto dead = nodes.ExpireSilent(t0 + 2600ms);  // 600 ms of silence not excused
  REQUIRE(dead.size() == 1);
  CHECK(dead[0].id == ids[0]);
  for (int i = 1; i < 100; ++i) CHECK(nodes.Find(ids[i])->alive);

  // Without the excuse, the same late check would have killed all 100.
  NodeTable strict = Table();
  for (int i = 0; i < 100; ++i) strict.Report(static_cast<uint64_t>(i + 1), Report(ids[i], 1).get(), t0);
  CHECK(strict.ExpireSilent(t0 + 2300ms).size() == 100);
}

TEST_CASE("Excusing never moves a node's last report past now, nor revives the dead") {
  NodeTable nodes = Table();
  const Clock::time_point t0{};
  NodeId a = NodeId::Random(), b = NodeId::Random();
  nodes.Report(1, Report(a, 1).get(), t0);
  nodes.Report(2, Report(b, 1).get(), t0 + 900ms);
  REQUIRE(nodes.ExpireSilent(t0 + 1s).size() == 1);  // a
  nodes.ExcuseSilence(10s, t0 + 1s);                   // b would move to 10.9 s without the cap
  CHECK(nodes.Find(b)->last_report == t0 + 1s);
  CHECK_FALSE(nodes.Find(a)->alive);
  CHECK(nodes.ExpireSilent(t0 + 1500ms).empty());
  CHECK(nodes.ExpireSilent(t0 + 1501ms).size() == 1);  // b: 500 ms after the excused stall
}

TEST_CASE("A malformed report is refused before the table changes") {
  // Invariant (hostile input, reliability items 15 and 16): a report whose
  // address text lacks its NUL (what head_dispatch_fuzzer sent) throws out of
  // Report, leaving no node behind; before, a node entry without its stats
  // frame was left, and listing it threw again outside any frame handler,
  // which took the head down.
  const NodeId a = NodeId::Random();
  Report good(a, 4);
  capnp::MallocMessageBuilder copy;
  copy.setRoot(good.get());
  kj::Array<capnp::word> words = capnp::messageToFlatArray(copy);
  kj::ArrayPtr<kj::byte> bytes = words.asBytes();
  const std::string text = "127.0.0.1:1";
  auto at = std::search(bytes.begin(), bytes.end(), text.begin(), text.end());
  REQUIRE(at != bytes.end());
  REQUIRE(at[text.size()] == '\0');
  at[text.size()] = 'x';  // the text's NUL gone
  capnp::FlatArrayMessageReader reader(words);
  NodeTable nodes = Table();
  const Clock::time_point t0{};
  CHECK_THROWS(nodes.Report(1, reader.getRoot<proto::NodeStats>(), t0, /*registering=*/true));
  CHECK(nodes.size() == 0);
  capnp::MallocMessageBuilder out;
  nodes.FillNodes(out.initRoot<proto::ClusterView>().initNodes(nodes.size()));
  // The same node, well-formed, joins as usual.
  CHECK(nodes.Report(1, good.get(), t0, /*registering=*/true) == NodeTable::ReportOutcome::kJoined);
  CHECK(nodes.size() == 1);
}

}  // namespace
}  // namespace lumen::head
