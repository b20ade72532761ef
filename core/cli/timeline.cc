#include "lumen/cli/timeline.h"

#include <boost/json.hpp>

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <utility>

#include "absl/container/flat_hash_map.h"

namespace lumen::cli {
namespace {

namespace json = boost::json;

// What the events of one task attempt say, from every process that recorded them.
struct Attempt {
  std::string name;          // the task's, as its SUBMITTED gave it
  std::string started_name;  // the function, as its STARTED gave it
  bool actor_call = false;
  // The time of each kind (0: not recorded).
  int64_t at[kNumTaskEventKinds] = {};
  int owner_pid = 0;
  int executor_pid = 0;
  size_t owner_node = 0;     // index into the trace's nodes
  size_t executor_node = 0;
  int worker_pid = 0;        // LEASE_GRANTED's worker
  std::string error;
};

int64_t At(const Attempt& a, TaskEventKind kind) { return a.at[static_cast<int>(kind)]; }

// Milliseconds between two recorded times, or null when either is missing.
json::value PhaseMs(int64_t from, int64_t to) {
  if (from == 0 || to == 0 || to < from) return nullptr;
  return static_cast<double>(to - from) / 1000.0;
}

json::object Metadata(const char* what, int pid, std::optional<int> tid, const std::string& name) {
  json::object m;
  m["name"] = what;
  m["ph"] = "M";
  m["pid"] = pid;
  if (tid) m["tid"] = *tid;
  m["args"] = json::object{{"name", name}};
  return m;
}

}  // namespace

std::string BuildChromeTrace(const std::vector<runtime::NodeTaskEvents>& nodes) {
  json::array trace;
  // Task attempts, keyed by task id and attempt, in first-seen order.
  std::map<std::pair<TaskId, uint32_t>, Attempt> attempts;
  // Rows: (node index, pid) -> its role, for the thread names.
  std::map<std::pair<size_t, int>, std::string> rows;
  absl::flat_hash_map<NodeId, size_t> node_index;
  for (size_t n = 0; n < nodes.size(); ++n) node_index[nodes[n].node] = n;

  for (size_t n = 0; n < nodes.size(); ++n) {
    for (const TaskEvent& e : nodes[n].events) {
      if (e.kind == TaskEventKind::kPull || e.kind == TaskEventKind::kSpill ||
          e.kind == TaskEventKind::kRestore) {
        // The node daemon's copies: between nodes (pull), to and from disk.
        rows.emplace(std::make_pair(n, e.pid), "node daemon");
        double seconds = static_cast<double>(e.duration_us) / 1e6;
        const bool pull = e.kind == TaskEventKind::kPull;
        json::object slice{{"name", pull ? "pull" : e.kind == TaskEventKind::kSpill ? "spill" : "restore"},
                           {"cat", pull ? "transfer" : "spilling"},
                           {"ph", "X"},
                           {"pid", n + 1},
                           {"tid", e.pid},
                           {"ts", e.time_us - e.duration_us},
                           {"dur", std::max<int64_t>(e.duration_us, 1)}};
        json::object args{
            {e.kind == TaskEventKind::kSpill ? "objects" : "object_id", e.name},
            {"bytes", e.bytes},
            {"mb_per_s", seconds > 0 ? static_cast<double>(e.bytes) / 1e6 / seconds : 0.0}};
        if (pull) args["from_node"] = e.node.Hex().substr(0, 12);
        slice["args"] = std::move(args);
        trace.push_back(std::move(slice));
        continue;
      }
      if (e.task_id.IsNil()) {  // the daemon's own lease grant
        rows.emplace(std::make_pair(n, e.pid), "node daemon");
        continue;
      }
      Attempt& a = attempts[{e.task_id, e.attempt}];
      a.at[static_cast<int>(e.kind)] = e.time_us;
      a.actor_call |= e.actor_call;
      switch (e.kind) {
        case TaskEventKind::kSubmitted:
          if (!e.name.empty()) a.name = e.name;
          a.owner_pid = e.pid;
          a.owner_node = n;
          rows.emplace(std::make_pair(n, e.pid), "driver");
          break;
        case TaskEventKind::kStarted: {
          if (!e.name.empty()) a.started_name = e.name;
          a.executor_pid = e.pid;
          // Its node: the one it names (the owner's node delivers the
          // STARTED its FINISHED carried, task_events.h), else the deliverer.
          auto where = e.node.IsNil() ? node_index.end() : node_index.find(e.node);
          a.executor_node = where != node_index.end() ? where->second : n;
          rows[std::make_pair(a.executor_node, e.pid)] = "worker";
          break;
        }
        case TaskEventKind::kLeaseGranted:
          a.worker_pid = e.worker_pid;
          if (a.name.empty()) a.name = e.name;
          break;
        case TaskEventKind::kFailed:
          a.error = e.name;
          break;
        default:
          break;
      }
    }
  }

  // The last time anything happened: where a running task's slice ends.
  int64_t last = 0;
  for (const auto& node : nodes)
    for (const auto& e : node.events) last = std::max(last, e.time_us);

  // A slice is named after the task (its SUBMITTED's name: the one given
  // with SetName, else the function), else after what its STARTED ran, else
  // (a retried attempt: its SUBMITTED is the first attempt's) after another
  // attempt of the task.
  absl::flat_hash_map<TaskId, std::string> task_names;
  for (auto& [key, a] : attempts) {
    if (a.name.empty()) a.name = a.started_name;
    if (!a.name.empty()) task_names.try_emplace(key.first, a.name);
  }
  for (auto& [key, a] : attempts) {
    if (a.name.empty()) {
      auto named = task_names.find(key.first);
      if (named != task_names.end()) a.name = named->second;
    }
  }

  uint64_t flow_id = 0;
  for (const auto& [key, a] : attempts) {
    int64_t started = At(a, TaskEventKind::kStarted);
    if (started == 0 || a.executor_pid == 0) continue;  // never ran (or not seen running)
    int64_t stored = At(a, TaskEventKind::kResultStored);
    int64_t executed = At(a, TaskEventKind::kExecuted);
    int64_t fetched = At(a, TaskEventKind::kArgsFetched);
    int64_t end = stored ? stored : executed ? executed : last;
    const char* status = At(a, TaskEventKind::kFailed)     ? "FAILED"
                         : At(a, TaskEventKind::kFinished) ? "FINISHED"
                         : stored                          ? "RETURNED"
                                                           : "RUNNING";
    json::object args{{"task_id", key.first.Hex()},
                      {"attempt", key.second},
                      {"status", status},
                      {"kind", a.actor_call ? "actor call" : "task"},
                      {"dependency_wait_ms", PhaseMs(At(a, TaskEventKind::kSubmitted),
                                                     At(a, TaskEventKind::kDependenciesReady))},
                      {"lease_wait_ms", PhaseMs(At(a, TaskEventKind::kDependenciesReady),
                                                At(a, TaskEventKind::kLeaseGranted))},
                      {"arg_fetch_ms", PhaseMs(started, fetched)},
                      {"execution_ms", PhaseMs(fetched ? fetched : started, executed)},
                      {"result_store_ms", PhaseMs(executed, stored)}};
    if (!a.error.empty()) args["error"] = a.error;
    json::object slice{{"name", a.name},
                       {"cat", a.actor_call ? "actor_call" : "task"},
                       {"ph", "X"},
                       {"pid", a.executor_node + 1},
                       {"tid", a.executor_pid},
                       {"ts", started},
                       {"dur", std::max<int64_t>(end - started, 1)},
                       {"args", std::move(args)}};
    trace.push_back(std::move(slice));

    int64_t submitted = At(a, TaskEventKind::kSubmitted);
    if (submitted == 0 || a.owner_pid == 0) continue;  // submitted before the events kept
    ++flow_id;
    trace.push_back(json::object{{"name", "submit " + a.name},
                                 {"cat", "submit"},
                                 {"ph", "X"},
                                 {"pid", a.owner_node + 1},
                                 {"tid", a.owner_pid},
                                 {"ts", submitted},
                                 {"dur", 1},
                                 {"args", json::object{{"task_id", key.first.Hex()}}}});
    trace.push_back(json::object{{"name", "submit"},
                                 {"cat", "flow"},
                                 {"ph", "s"},
                                 {"id", flow_id},
                                 {"pid", a.owner_node + 1},
                                 {"tid", a.owner_pid},
                                 {"ts", submitted}});
    trace.push_back(json::object{{"name", "submit"},
                                 {"cat", "flow"},
                                 {"ph", "f"},
                                 {"bp", "e"},
                                 {"id", flow_id},
                                 {"pid", a.executor_node + 1},
                                 {"tid", a.executor_pid},
                                 {"ts", started}});
  }

  // Names of the rows, first: one process per node, one thread per process.
  json::array named;
  for (size_t n = 0; n < nodes.size(); ++n) {
    named.push_back(Metadata("process_name", static_cast<int>(n + 1), std::nullopt,
                             "node " + nodes[n].node.Hex().substr(0, 12)));
  }
  for (const auto& [row, role] : rows) {
    const auto& [n, pid] = row;
    std::string name = role == "node daemon" ? "node daemon (pid " + std::to_string(pid) + ")"
                                             : role + " pid " + std::to_string(pid);
    named.push_back(Metadata("thread_name", static_cast<int>(n + 1), pid, name));
  }
  for (auto& slice : trace) named.push_back(std::move(slice));
  json::object root;
  root["traceEvents"] = std::move(named);
  root["displayTimeUnit"] = "ms";
  return json::serialize(root);
}

}  // namespace lumen::cli
