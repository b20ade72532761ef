// The dashboard's GET /api/cluster body (RenderClusterJson) parsed back with
// Boost.JSON: every part the page shows is there with the values it was
// built from; the demand words match `lumen status`'s; and the shared demand
// words themselves (DescribeInfeasible).
#include "core/head/cluster_json.h"

#include <capnp/message.h>
#include <boost/json.hpp>
#include <catch2/catch.hpp>
#include <limits>

#include "lumen/common/ids.h"
#include "lumen/common/proto_util.h"
#include "lumen/head/demand_words.h"

namespace lumen::head {
namespace {

namespace json = boost::json;

void FillNode(proto::NodeStats::Builder n, const NodeId& id, bool alive, const char* host) {
  n.setNodeId(DataOf(id));
  n.setHostname(host);
  n.setAddress("127.0.0.1:1;/tmp/s");
  n.setPid(42);
  n.setAlive(alive);
  SetResources(n.initTotal(2), {{"CPU", 4}, {"memory", 2.0 * (1 << 30)}});
  SetResources(n.initAvailable(2), {{"CPU", 1}, {"memory", 1.0 * (1 << 30)}});
  n.setStoreCapacity(256 << 20);
  n.setStoreUsed(64 << 20);
  n.setStoreObjects(7);
  n.setWorkers(5);
  n.setIdleWorkers(2);
  n.setActiveLeases(3);
  n.setQueuedLeases(2);
}

runtime::StateRow TaskRow(const std::string& id, const std::string& name, const std::string& state,
                          const std::string& node) {
  return {{"NODE_DAEMON", "n"}, {"TASK_ID", id}, {"NAME", name}, {"STATE", state},
          {"NODE", node}, {"OWNER", "driver 7"}};
}

const json::object* Find(const json::array& list, const char* key, const std::string& value) {
  for (const auto& v : list) {
    if (v.as_object().at(key).as_string() == value.c_str()) return &v.as_object();
  }
  return nullptr;
}

// Invariant: the body is valid JSON and each section holds what the snapshot
// holds, counted and shortened the way the page and `lumen status` show it.
TEST_CASE("RenderClusterJson reports nodes, tasks, actors, groups, demand and failures") {
  NodeId a = NodeId::Random(), b = NodeId::Random(), dead = NodeId::Random();
  capnp::MallocMessageBuilder message;
  auto nodes = message.initRoot<proto::ClusterView>().initNodes(3);
  FillNode(nodes[0], a, true, "alpha");
  FillNode(nodes[1], b, true, "beta");
  FillNode(nodes[2], dead, false, "gone");
  nodes[0].setQueuedLeases(5);  // 3 of them infeasible
  auto demand = nodes[0].initInfeasible(1);
  demand[0].setCount(3);
  demand[0].setName("Train");
  SetResources(demand[0].initResources(1), {{"GPU", 1}});
  auto gpus = nodes[1].initGpus(1);  // node b samples one GPU through NVML
  gpus[0].setIndex(0);
  gpus[0].setName("NVIDIA A100");
  gpus[0].setUtilizationKnown(true);
  gpus[0].setUtilization(0.5);
  gpus[0].setMemoryUsedBytes(1ull << 30);
  gpus[0].setMemoryTotalBytes(4ull << 30);

  capnp::MallocMessageBuilder groups_message;
  auto groups = groups_message.initRoot<proto::Envelope>().initPlacementGroups(1);
  groups[0].setGroupId(BytesOf("0123456789abcdef0123"));
  groups[0].setName("trainers");
  groups[0].setStrategy(proto::PlacementStrategy::STRICT_SPREAD);
  groups[0].setState("PENDING");
  groups[0].setError("needs 3 nodes");
  auto bundles = groups[0].initBundles(2);
  SetResources(bundles[0].initResources(1), {{"CPU", 1}});
  SetResources(bundles[1].initResources(1), {{"CPU", 2}});
  bundles[0].setNodeId(DataOf(a));

  TaskId failed = TaskId::Random();
  std::vector<NodeAnswer> answers(2);
  answers[0].node = a;
  answers[0].tasks = {TaskRow("1111222233334444", "SlowStep", "RUNNING", b.Hex().substr(0, 16)),
                      TaskRow("5555666677778888", "Waits", "PENDING_NODE_ASSIGNMENT", ""),
                      TaskRow("9999aaaabbbbcccc", "Done", "FINISHED", ""),
                      TaskRow(failed.Hex().substr(0, 16), "Explodes", "FAILED", "")};
  answers[0].actors = {{{"ACTOR_ID", "aaaabbbbccccdddd"}, {"CLASS", "Counter::Create"},
                        {"STATE", "ALIVE"}, {"NAME", "counter"}, {"NODE", a.Hex().substr(0, 16)},
                        {"PID", "99"}, {"RESTARTS", "1"}, {"OWNER", "driver 7"}}};
  answers[0].failures = {
      {.time_us = 1'000'000, .kind = "task", .task_id = failed.Hex(), .message = "boom", .pid = 7},
      {.time_us = 3'000'000, .kind = "worker", .task_id = "",
       .message = "worker pid 55 killed by signal 9 (SIGKILL)", .pid = 55}};
  answers[1].node = b;
  answers[1].status = absl::DeadlineExceededError("did not answer within 3000 ms");
  answers[1].failures = {{.time_us = 2'000'000, .kind = "actor call", .task_id = TaskId::Random().Hex(),
                          .message = "the actor died", .pid = 8}};

  std::string body = RenderClusterJson({.nodes = nodes.asReader(),
                                        .groups = groups.asReader(),
                                        .answers = answers,
                                        .now_us = 5'000'000});
  INFO(body);
  boost::system::error_code ec;
  json::value root = json::parse(body, ec);
  REQUIRE(!ec);
  const json::object& o = root.as_object();
  CHECK(o.at("time_ms").as_int64() == 5000);

  const json::object& summary = o.at("summary").as_object();
  CHECK(summary.at("nodes_alive").as_int64() == 2);
  CHECK(summary.at("nodes_dead").as_int64() == 1);
  CHECK(summary.at("tasks_running").to_number<int>() == 1);
  CHECK(summary.at("tasks_queued").to_number<int>() == 1);
  CHECK(summary.at("tasks_finished").to_number<int>() == 1);
  CHECK(summary.at("tasks_failed").to_number<int>() == 1);
  CHECK(summary.at("actors_alive").to_number<int>() == 1);
  CHECK(summary.at("failures").to_number<int>() == 3);

  const json::array& node_list = o.at("nodes").as_array();
  REQUIRE(node_list.size() == 3);
  const json::object* na = Find(node_list, "id", a.Hex().substr(0, 12));
  REQUIRE(na != nullptr);
  CHECK(na->at("host") == "alpha");
  CHECK(na->at("alive").as_bool());
  CHECK(na->at("answered").as_bool());
  const json::object* cpu = Find(na->at("resources").as_array(), "name", "CPU");
  REQUIRE(cpu != nullptr);
  CHECK(cpu->at("used").as_double() == 3);
  CHECK(cpu->at("total").as_double() == 4);
  CHECK(cpu->at("text") == "3 / 4");
  const json::object* memory = Find(na->at("resources").as_array(), "name", "memory");
  REQUIRE(memory != nullptr);
  CHECK(memory->at("text") == "1.0 GiB / 2.0 GiB");
  CHECK(na->at("store").at("used").to_number<uint64_t>() == (64u << 20));
  CHECK(na->at("store").at("text") == "64.0 MiB / 256.0 MiB");
  CHECK(na->at("store").at("objects").to_number<int>() == 7);
  const json::object* nb = Find(node_list, "id", b.Hex().substr(0, 12));
  REQUIRE(nb != nullptr);
  CHECK(!nb->at("answered").as_bool());
  CHECK(nb->at("error") == "did not answer within 3000 ms");
  CHECK(na->at("gpus").as_array().empty());
  const json::array& b_gpus = nb->at("gpus").as_array();
  REQUIRE(b_gpus.size() == 1);
  CHECK(b_gpus[0].at("name") == "NVIDIA A100");
  CHECK(b_gpus[0].at("utilization").as_double() == 0.5);
  CHECK(b_gpus[0].at("memory_total").to_number<uint64_t>() == (4ull << 30));
  CHECK(b_gpus[0].at("memory_text") == "1.0 GiB / 4.0 GiB");
  CHECK(!Find(node_list, "id", dead.Hex().substr(0, 12))->at("alive").as_bool());

  const json::array& running = o.at("tasks").at("running").as_array();
  REQUIRE(running.size() == 1);
  CHECK(running[0].at("name") == "SlowStep");
  CHECK(running[0].at("node") == b.Hex().substr(0, 12).c_str());
  CHECK(running[0].at("owner_node") == a.Hex().substr(0, 12).c_str());
  const json::array& queued = o.at("tasks").at("queued").as_array();
  REQUIRE(queued.size() == 1);
  CHECK(queued[0].at("state") == "PENDING_NODE_ASSIGNMENT");

  const json::array& actors = o.at("actors").as_array();
  REQUIRE(actors.size() == 1);
  CHECK(actors[0].at("class") == "Counter::Create");
  CHECK(actors[0].at("state") == "ALIVE");
  CHECK(actors[0].at("restarts") == "1");

  const json::array& group_list = o.at("placement_groups").as_array();
  REQUIRE(group_list.size() == 1);
  CHECK(group_list[0].at("strategy") == "STRICT_SPREAD");
  CHECK(group_list[0].at("bundles") == "CPU: 1 | CPU: 2");
  CHECK(group_list[0].at("nodes") == (a.Hex().substr(0, 12) + ", -").c_str());
  CHECK(group_list[0].at("error") == "needs 3 nodes");

  // The same words as `lumen status`: no node has a GPU.
  const json::array& infeasible = o.at("infeasible").as_array();
  REQUIRE(infeasible.size() == 1);
  CHECK(infeasible[0].at("text") == "3 tasks (Train) need {GPU: 1}; no node has a GPU");
  CHECK(infeasible[0].at("resources").at("GPU").as_double() == 1);
  // Both alive nodes have waiting lease requests (less the infeasible ones);
  // the dead one is left out.
  const json::array& pending = o.at("pending").as_array();
  REQUIRE(pending.size() == 2);
  const json::object* pa = Find(pending, "node", a.Hex().substr(0, 12));
  REQUIRE(pa != nullptr);
  CHECK(pa->at("count").as_int64() == 2);
  CHECK(pa->at("text") ==
        ("2 lease requests wait for busy resources on node " + a.Hex().substr(0, 12)).c_str());

  // Newest first; a failed task is named from its owner's rows.
  const json::array& failures = o.at("failures").as_array();
  REQUIRE(failures.size() == 3);
  CHECK(failures[0].at("kind") == "worker");
  CHECK(failures[0].at("message") == "worker pid 55 killed by signal 9 (SIGKILL)");
  CHECK(failures[1].at("kind") == "actor call");
  CHECK(failures[1].at("node") == b.Hex().substr(0, 12).c_str());
  CHECK(failures[2].at("name") == "Explodes");
  CHECK(failures[2].at("message") == "boom");
  CHECK(failures[2].at("time_ms").as_int64() == 1000);
}

// Invariant: user text (task names, errors) is escaped by the JSON library,
// never breaking the document; and the lists are bounded.
TEST_CASE("RenderClusterJson escapes user text and bounds its lists") {
  capnp::MallocMessageBuilder message;
  auto nodes = message.initRoot<proto::ClusterView>().initNodes(1);
  NodeId a = NodeId::Random();
  FillNode(nodes[0], a, true, "host \"quoted\" </script>");
  capnp::MallocMessageBuilder groups_message;
  auto groups = groups_message.initRoot<proto::Envelope>().initPlacementGroups(0);
  std::vector<NodeAnswer> answers(1);
  answers[0].node = a;
  for (size_t i = 0; i < kMaxListed + 10; ++i) {
    answers[0].tasks.push_back(TaskRow(std::to_string(i), "Step\n\"x\"", "RUNNING", ""));
  }
  for (size_t i = 0; i < kMaxFailures + 5; ++i) {
    answers[0].failures.push_back({.time_us = static_cast<int64_t>(i), .kind = "task",
                                   .task_id = "", .message = "line1\nline2 \\ \"q\"", .pid = 1});
  }
  std::string body = RenderClusterJson({.nodes = nodes.asReader(), .groups = groups.asReader(),
                                        .answers = answers, .now_us = 0});
  boost::system::error_code ec;
  json::value root = json::parse(body, ec);
  REQUIRE(!ec);
  CHECK(root.at("nodes").at(0).at("host") == "host \"quoted\" </script>");
  CHECK(root.at("tasks").at("running").as_array().size() == kMaxListed);
  CHECK(root.at("tasks").at("running_total").to_number<size_t>() == kMaxListed + 10);
  CHECK(root.at("tasks").at("running").at(0).at("name") == "Step\n\"x\"");
  CHECK(root.at("failures").as_array().size() == kMaxFailures);
  CHECK(root.at("failures").at(0).at("message") == "line1\nline2 \\ \"q\"");
  CHECK(root.at("summary").at("failures").to_number<size_t>() == kMaxFailures + 5);
}

TEST_CASE("DescribeInfeasible says why no node fits, in words") {
  std::vector<std::map<std::string, double>> alive = {{{"CPU", 2}}, {{"CPU", 4}}};
  CHECK(DescribeInfeasible(1, "Fit", {{"GPU", 1}}, alive) ==
        "1 task (Fit) needs {GPU: 1}; no node has a GPU");
  CHECK(DescribeInfeasible(2, "Big", {{"CPU", 8}}, alive) ==
        "2 tasks (Big) need {CPU: 8}; the most any node has is 4 CPU");
  CHECK(WhyInfeasible(alive, {{"CPU", 3}}) == "no single node has all of it at once");
  CHECK(WhyInfeasible(alive, {{"TPU", 1}}) == "no node has TPU");
  CHECK(FormatResources({{"CPU", 0.5}, {"memory", 1024.0 * 1024 * 1024}}) ==
        "CPU: 0.5, memory: 1.0 GiB");
  // A node's report is not trusted to hold a byte count: what has no uint64_t
  // is printed as a number (the cast was undefined).
  CHECK(FormatQuantity("memory", -1) == "-1");
  CHECK(FormatQuantity("memory", 1e30) == "1e+30");
  CHECK(FormatQuantity("memory", std::numeric_limits<double>::quiet_NaN()) == "nan");
  CHECK(FormatQuantity("memory", 0x1p63) == "8.0 EiB");
  // Pending demand fits a node but waits for it.
  CHECK(DescribePending(3, "Fit", {{"CPU", 1}}, "3f2a01") ==
        "3 tasks (Fit) need {CPU: 1}; they wait for busy resources or a free worker on node 3f2a01");
  CHECK(DescribePending(1, "Fit", {{"CPU", 1}, {"GPU", 0}}, "3f2a01") ==
        "1 task (Fit) needs {CPU: 1}; it waits for busy resources or a free worker on node 3f2a01");
}

}  // namespace
}  // namespace lumen::head
