#include "core/head/cluster_json.h"

#include <algorithm>
#include <map>
#include <utility>

#include <boost/json.hpp>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "lumen/common/format_bytes.h"
#include "lumen/common/head_client.h"
#include "lumen/common/ids.h"
#include "lumen/common/proto_util.h"
#include "lumen/head/demand_words.h"

namespace lumen::head {
namespace {

namespace json = boost::json;

constexpr size_t kShortId = 12;

std::string Short(const std::string& hex) { return hex.substr(0, kShortId); }

std::string NodeHex(capnp::Data::Reader id) { return IdFrom<NodeId>(id).Hex(); }

// The value of `key` in `row`, or "".
std::string Field(const runtime::StateRow& row, std::string_view key) {
  for (const auto& [k, v] : row) {
    if (k == key) return v;
  }
  return "";
}

json::array ResourcesJson(const std::map<std::string, double>& total,
                          const std::map<std::string, double>& available) {
  json::array out;
  for (const auto& [name, qty] : total) {
    auto it = available.find(name);
    double used = std::max(0.0, qty - (it == available.end() ? 0.0 : it->second));
    out.push_back(json::object{{"name", name},
                               {"used", used},
                               {"total", qty},
                               {"text", absl::StrCat(FormatQuantity(name, used), " / ",
                                                     FormatQuantity(name, qty))}});
  }
  return out;
}

// The node's GPUs as NVML sampled them (empty without NVML).
json::array GpusJson(capnp::List<proto::GpuStats>::Reader gpus) {
  json::array out;
  for (auto g : gpus) {
    json::object gpu{{"index", g.getIndex()},
                     {"name", g.getName().cStr()},
                     {"memory_used", g.getMemoryUsedBytes()},
                     {"memory_total", g.getMemoryTotalBytes()},
                     {"memory_text", absl::StrCat(FormatBytes(g.getMemoryUsedBytes()), " / ",
                                                  FormatBytes(g.getMemoryTotalBytes()))}};
    // null where NVML does not sample it
    if (g.getUtilizationKnown()) {
      gpu["utilization"] = g.getUtilization();
    } else {
      gpu["utilization"] = nullptr;
    }
    out.push_back(std::move(gpu));
  }
  return out;
}

json::object NodeJson(proto::NodeStats::Reader n, const NodeAnswer* answer) {
  json::object node{
      {"id", Short(NodeHex(n.getNodeId()))},
      {"host", n.getHostname().cStr()},
      {"address", n.getAddress().cStr()},
      {"pid", n.getPid()},
      {"alive", n.getAlive()},
      {"answered", answer != nullptr && answer->status.ok()},
      {"error", answer != nullptr && !answer->status.ok() ? std::string(answer->status.message())
                                                          : std::string()},
      {"resources", ResourcesJson(ReadResources(n.getTotal()), ReadResources(n.getAvailable()))},
      {"store",
       json::object{{"used", n.getStoreUsed()},
                    {"capacity", n.getStoreCapacity()},
                    {"objects", n.getStoreObjects()},
                    {"text", absl::StrCat(FormatBytes(n.getStoreUsed()), " / ",
                                          FormatBytes(n.getStoreCapacity()))}}},
      {"gpus", GpusJson(n.getGpus())},
      {"workers", n.getWorkers()},
      {"idle_workers", n.getIdleWorkers()},
      {"active_leases", n.getActiveLeases()},
      {"queued_leases", n.getQueuedLeases()}};
  return node;
}

json::object TaskJson(const runtime::StateRow& row, const std::string& owner_node) {
  return json::object{{"id", Short(Field(row, "TASK_ID"))},
                      {"name", Field(row, "NAME")},
                      {"state", Field(row, "STATE")},
                      {"node", Short(Field(row, "NODE"))},
                      {"owner", Field(row, "OWNER")},
                      {"owner_node", owner_node}};
}

json::object ActorJson(const runtime::StateRow& row) {
  return json::object{{"id", Short(Field(row, "ACTOR_ID"))},
                      {"class", Field(row, "CLASS")},
                      {"name", Field(row, "NAME")},
                      {"state", Field(row, "STATE")},
                      {"node", Short(Field(row, "NODE"))},
                      {"pid", Field(row, "PID")},
                      {"restarts", Field(row, "RESTARTS")},
                      {"owner", Field(row, "OWNER")}};
}

json::object GroupJson(proto::PlacementGroupState::Reader g) {
  std::string bundles, nodes;
  size_t i = 0;
  for (auto b : g.getBundles()) {
    absl::StrAppend(&bundles, i ? " | " : "", FormatResources(ReadResources(b.getResources())));
    absl::StrAppend(&nodes, i ? ", " : "",
                    b.getNodeId().size() ? Short(NodeHex(b.getNodeId())) : "-");
    ++i;
  }
  return json::object{{"id", Short(StringOf(g.getGroupId()))},
                      {"name", g.getName().cStr()},
                      {"strategy", runtime::PlacementStrategyName(g.getStrategy())},
                      {"state", g.getState().cStr()},
                      {"bundles", bundles},
                      {"nodes", nodes},
                      {"error", g.getError().cStr()}};
}

}  // namespace

std::string RenderClusterJson(const ClusterSnapshot& snapshot) {
  absl::flat_hash_map<std::string, const NodeAnswer*> answer_of;  // full node hex ->
  for (const NodeAnswer& a : snapshot.answers) answer_of[a.node.Hex()] = &a;

  int64_t alive_nodes = 0, dead_nodes = 0;
  json::array nodes;
  std::vector<std::map<std::string, double>> alive_totals;
  for (auto n : snapshot.nodes) {
    auto it = answer_of.find(NodeHex(n.getNodeId()));
    nodes.push_back(NodeJson(n, it == answer_of.end() ? nullptr : it->second));
    if (n.getAlive()) {
      ++alive_nodes;
      alive_totals.push_back(ReadResources(n.getTotal()));
    } else {
      ++dead_nodes;
    }
  }

  // Demand, in `lumen status`'s words.
  json::array pending, infeasible;
  for (auto n : snapshot.nodes) {
    if (!n.getAlive()) continue;
    std::string node = Short(NodeHex(n.getNodeId()));
    // The queued requests include the infeasible ones, listed on their own below.
    int64_t waiting = n.getQueuedLeases();
    for (auto d : n.getInfeasible()) waiting -= d.getCount();
    if (waiting > 0) {
      pending.push_back(json::object{
          {"node", node},
          {"count", waiting},
          {"text", absl::StrCat(waiting, " lease request", waiting == 1 ? " waits" : "s wait",
                                " for busy resources on node ", node)}});
    }
    for (auto d : n.getInfeasible()) {
      auto need = ReadResources(d.getResources());
      json::object resources;
      for (const auto& [name, qty] : need) resources[name] = qty;
      infeasible.push_back(json::object{
          {"node", node},
          {"name", d.getName().cStr()},
          {"count", d.getCount()},
          {"resources", std::move(resources)},
          {"text", DescribeInfeasible(static_cast<int>(d.getCount()), d.getName().cStr(), need,
                                      alive_totals)}});
    }
  }

  // Tasks and actors as their owners list them; the names of failed tasks
  // for the failures below.
  json::array running, queued, actors;
  size_t running_total = 0, queued_total = 0, finished = 0, failed = 0, actors_total = 0,
         actors_alive = 0;
  absl::flat_hash_map<std::string, std::string> task_names;  // 12-hex id -> name
  for (const NodeAnswer& a : snapshot.answers) {
    std::string owner_node = Short(a.node.Hex());
    for (const auto& row : a.tasks) {
      std::string state = Field(row, "STATE");
      if (state == "RUNNING") {
        if (++running_total <= kMaxListed) running.push_back(TaskJson(row, owner_node));
      } else if (state.rfind("PENDING", 0) == 0) {
        if (++queued_total <= kMaxListed) queued.push_back(TaskJson(row, owner_node));
      } else if (state == "FINISHED") {
        ++finished;
      } else if (state == "FAILED") {
        ++failed;
        task_names[Short(Field(row, "TASK_ID"))] = Field(row, "NAME");
      }
    }
    for (const auto& row : a.actors) {
      actors_alive += Field(row, "STATE") == "ALIVE";
      if (++actors_total <= kMaxListed) actors.push_back(ActorJson(row));
    }
  }

  json::array groups;
  for (auto g : snapshot.groups) groups.push_back(GroupJson(g));

  // Failures of every node, newest first.
  struct Failure {
    const FailureView* view;
    std::string node;
  };
  std::vector<Failure> all;
  for (const NodeAnswer& a : snapshot.answers) {
    for (const FailureView& f : a.failures) all.push_back({&f, Short(a.node.Hex())});
  }
  std::stable_sort(all.begin(), all.end(), [](const Failure& x, const Failure& y) {
    return x.view->time_us > y.view->time_us;
  });
  json::array failures;
  for (size_t i = 0; i < all.size() && i < kMaxFailures; ++i) {
    const FailureView& f = *all[i].view;
    std::string id = Short(f.task_id);
    auto name = task_names.find(id);
    failures.push_back(json::object{{"time_ms", f.time_us / 1000},
                                    {"node", all[i].node},
                                    {"kind", f.kind},
                                    {"task_id", id},
                                    {"name", name == task_names.end() ? "" : name->second},
                                    {"message", f.message},
                                    {"pid", f.pid}});
  }

  json::object summary{{"nodes_alive", alive_nodes},
                       {"nodes_dead", dead_nodes},
                       {"tasks_running", running_total},
                       {"tasks_queued", queued_total},
                       {"tasks_finished", finished},
                       {"tasks_failed", failed},
                       {"actors", actors_total},
                       {"actors_alive", actors_alive},
                       {"placement_groups", groups.size()},
                       {"failures", all.size()}};
  json::object root{{"time_ms", snapshot.now_us / 1000},
                    {"summary", std::move(summary)},
                    {"nodes", std::move(nodes)},
                    {"tasks", json::object{{"running", std::move(running)},
                                           {"queued", std::move(queued)},
                                           {"running_total", running_total},
                                           {"queued_total", queued_total}}},
                    {"actors", std::move(actors)},
                    {"actors_total", actors_total},
                    {"placement_groups", std::move(groups)},
                    {"pending", std::move(pending)},
                    {"infeasible", std::move(infeasible)},
                    {"failures", std::move(failures)}};
  return json::serialize(root);
}

}  // namespace lumen::head
