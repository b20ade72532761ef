// BuildChromeTrace: task events of two nodes to a Chrome trace, checked by
// parsing the JSON back.
#include "lumen/cli/timeline.h"

#include <boost/json.hpp>
#include <catch2/catch.hpp>

namespace lumen::cli {
namespace {

namespace json = boost::json;

TaskEvent Event(TaskEventKind kind, const TaskId& task, int pid, int64_t time_us,
                std::string name = "") {
  return TaskEvent{.kind = kind, .pid = pid, .time_us = time_us, .task_id = task,
                   .name = std::move(name)};
}

const json::object* Find(const json::array& trace, const char* ph, const std::string& name) {
  for (const auto& e : trace) {
    const auto& o = e.as_object();
    if (o.at("ph") == ph && o.at("name").as_string() == name.c_str()) return &o;
  }
  return nullptr;
}

// Invariant: a task's slice lies on its executor's row (node process, worker
// thread), spans STARTED to RESULT_STORED, and carries each phase as the
// difference of its two events' times; its submit slice is on the owner's row
// with a flow to it. A task that never started has no slice.
TEST_CASE("the timeline puts each task on its worker's row with its phases") {
  runtime::NodeTaskEvents a{.node = NodeId::Random()}, b{.node = NodeId::Random()};
  TaskId remote = TaskId::Random(), failed = TaskId::Random(), never = TaskId::Random();
  // Driver pid 10 on node a submits `remote`, which runs on worker 30 of node b.
  a.events = {Event(TaskEventKind::kSubmitted, remote, 10, 1000, "Fit"),
              Event(TaskEventKind::kDependenciesReady, remote, 10, 1500),
              Event(TaskEventKind::kLeaseGranted, remote, 10, 3500),
              Event(TaskEventKind::kFinished, remote, 10, 20000),
              Event(TaskEventKind::kSubmitted, never, 10, 1000, "Never")};
  b.events = {Event(TaskEventKind::kStarted, remote, 30, 4000, "Fit"),
              Event(TaskEventKind::kArgsFetched, remote, 30, 4100),
              Event(TaskEventKind::kExecuted, remote, 30, 14100),
              Event(TaskEventKind::kResultStored, remote, 30, 14600)};
  // Worker 20 of node a runs `failed`, submitted before the events kept.
  a.events.push_back(Event(TaskEventKind::kStarted, failed, 20, 5000, "Boom"));
  a.events.push_back(Event(TaskEventKind::kExecuted, failed, 20, 6000));
  a.events.push_back(Event(TaskEventKind::kResultStored, failed, 20, 6001));
  a.events.push_back(Event(TaskEventKind::kFailed, failed, 10, 7000, "it broke"));
  TaskEvent pull{.kind = TaskEventKind::kPull, .pid = 5, .time_us = 9000, .name = "obj",
                 .node = a.node, .bytes = 2'000'000, .duration_us = 1000};
  b.events.push_back(pull);
  // Node a's store spilled 3 objects to one file and read one back.
  a.events.push_back(TaskEvent{.kind = TaskEventKind::kSpill, .pid = 4, .time_us = 11000,
                               .name = "3 objects", .bytes = 3'000'000, .duration_us = 2000});
  a.events.push_back(TaskEvent{.kind = TaskEventKind::kRestore, .pid = 4, .time_us = 12000,
                               .name = "obj2", .bytes = 1'000'000, .duration_us = 500});

  json::value root = json::parse(BuildChromeTrace({a, b}));
  const json::array& trace = root.at("traceEvents").as_array();

  const json::object* fit = Find(trace, "X", "Fit");
  REQUIRE(fit != nullptr);
  CHECK(fit->at("pid").as_int64() == 2);  // node b
  CHECK(fit->at("tid").as_int64() == 30);
  CHECK(fit->at("ts").as_int64() == 4000);
  CHECK(fit->at("dur").as_int64() == 10600);
  const auto& args = fit->at("args").as_object();
  CHECK(args.at("status") == "FINISHED");
  CHECK(args.at("dependency_wait_ms").to_number<double>() == Approx(0.5));
  CHECK(args.at("lease_wait_ms").to_number<double>() == Approx(2.0));
  CHECK(args.at("arg_fetch_ms").to_number<double>() == Approx(0.1));
  CHECK(args.at("execution_ms").to_number<double>() == Approx(10.0));
  CHECK(args.at("result_store_ms").to_number<double>() == Approx(0.5));
  CHECK(args.at("task_id").as_string() == remote.Hex().c_str());

  const json::object* boom = Find(trace, "X", "Boom");
  REQUIRE(boom != nullptr);
  CHECK(boom->at("pid").as_int64() == 1);
  CHECK(boom->at("tid").as_int64() == 20);
  CHECK(boom->at("args").at("status") == "FAILED");
  CHECK(boom->at("args").at("error") == "it broke");
  CHECK(boom->at("args").at("dependency_wait_ms").is_null());

  CHECK(Find(trace, "X", "Never") == nullptr);
  const json::object* submit = Find(trace, "X", "submit Fit");
  REQUIRE(submit != nullptr);
  CHECK(submit->at("pid").as_int64() == 1);
  CHECK(submit->at("tid").as_int64() == 10);
  const json::object* from = Find(trace, "s", "submit");
  const json::object* to = Find(trace, "f", "submit");
  REQUIRE(from != nullptr);
  REQUIRE(to != nullptr);
  CHECK(from->at("id") == to->at("id"));
  CHECK(to->at("pid").as_int64() == 2);
  CHECK(to->at("tid").as_int64() == 30);
  CHECK(to->at("ts").as_int64() == 4000);

  const json::object* pulled = Find(trace, "X", "pull");
  REQUIRE(pulled != nullptr);
  CHECK(pulled->at("args").at("bytes").to_number<uint64_t>() == 2'000'000);
  CHECK(pulled->at("args").at("mb_per_s").to_number<double>() == Approx(2000.0));
  const json::object* spilled = Find(trace, "X", "spill");
  REQUIRE(spilled != nullptr);
  CHECK(spilled->at("pid").as_int64() == 1);  // node a
  CHECK(spilled->at("ts").as_int64() == 9000);
  CHECK(spilled->at("dur").as_int64() == 2000);
  CHECK(spilled->at("args").at("objects") == "3 objects");
  CHECK(spilled->at("args").at("bytes").to_number<uint64_t>() == 3'000'000);
  const json::object* restored = Find(trace, "X", "restore");
  REQUIRE(restored != nullptr);
  CHECK(restored->at("args").at("object_id") == "obj2");
  CHECK(restored->at("args").at("mb_per_s").to_number<double>() == Approx(2000.0));

  // Rows: one process per node, one thread per process that recorded events.
  std::map<std::string, std::string> names;
  for (const auto& e : trace) {
    const auto& o = e.as_object();
    if (o.at("ph") != "M") continue;
    std::string key = std::string(o.at("name").as_string()) + " " +
                      std::to_string(o.at("pid").as_int64()) +
                      (o.contains("tid") ? " " + std::to_string(o.at("tid").as_int64()) : "");
    names[key] = std::string(o.at("args").at("name").as_string());
  }
  CHECK(names["process_name 1"] == "node " + a.node.Hex().substr(0, 12));
  CHECK(names["process_name 2"] == "node " + b.node.Hex().substr(0, 12));
  CHECK(names["thread_name 1 10"] == "driver pid 10");
  CHECK(names["thread_name 1 20"] == "worker pid 20");
  CHECK(names["thread_name 2 30"] == "worker pid 30");
  CHECK(names["thread_name 2 5"] == "node daemon (pid 5)");
  CHECK(names["thread_name 1 4"] == "node daemon (pid 4)");  // its spill and restore
  CHECK(names.size() == 7);
}

// Invariant: a worker's events its owner's node delivered (the FINISHED that
// carried them, task_events.h) put the task on the row of the node its
// STARTED names, not the delivering node's; the slice takes the submitted
// name when STARTED has none (a FAILED's record carries its message instead).
TEST_CASE("the timeline puts a task on the node its STARTED names") {
  runtime::NodeTaskEvents a{.node = NodeId::Random()}, b{.node = NodeId::Random()};
  TaskId remote = TaskId::Random();
  TaskEvent started = Event(TaskEventKind::kStarted, remote, 30, 4000);
  started.node = b.node;  // ran on node b; delivered by node a, its owner's
  a.events = {Event(TaskEventKind::kSubmitted, remote, 10, 1000, "Fit"),
              started,
              Event(TaskEventKind::kArgsFetched, remote, 30, 4100),
              Event(TaskEventKind::kExecuted, remote, 30, 5100),
              Event(TaskEventKind::kResultStored, remote, 30, 5200),
              Event(TaskEventKind::kFinished, remote, 10, 6000)};
  json::value root = json::parse(BuildChromeTrace({a, b}));
  const json::array& trace = root.at("traceEvents").as_array();
  const json::object* fit = Find(trace, "X", "Fit");
  REQUIRE(fit != nullptr);
  CHECK(fit->at("pid").as_int64() == 2);  // node b
  CHECK(fit->at("tid").as_int64() == 30);
  CHECK(fit->at("dur").as_int64() == 1200);
  CHECK(fit->at("args").at("execution_ms").to_number<double>() == Approx(1.0));
  // A task given a name (SetName) is shown by it, whatever its STARTED ran.
  TaskId named = TaskId::Random();
  a.events = {Event(TaskEventKind::kStarted, named, 30, 4000, "Fn"),
              Event(TaskEventKind::kSubmitted, named, 10, 1000, "my step")};
  json::value renamed = json::parse(BuildChromeTrace({a, b}));
  CHECK(Find(renamed.at("traceEvents").as_array(), "X", "my step") != nullptr);
  CHECK(Find(renamed.at("traceEvents").as_array(), "X", "Fn") == nullptr);
  bool worker_row = false;
  for (const auto& e : trace) {
    const auto& o = e.as_object();
    if (o.at("ph") == "M" && o.at("name") == "thread_name" && o.at("pid").as_int64() == 2 &&
        o.at("tid").as_int64() == 30) {
      worker_row = o.at("args").at("name") == "worker pid 30";
    }
  }
  CHECK(worker_row);
}

}  // namespace
}  // namespace lumen::cli
