// Task events end to end: tasks and actor calls on a 2-node cluster, then
// `lumen timeline FILE` (the built binary) and the Chrome trace it wrote,
// parsed with Boost.JSON.
#include <unistd.h>

#include <boost/json.hpp>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "lumen/lumen.h"
#include "test/core/test_support.h"

namespace {

// Where it ran: "<pid> <node id hex>".
std::string WhereAmI(int delay_ms) {
  ::usleep(static_cast<useconds_t>(delay_ms) * 1000);
  return std::to_string(::getpid()) + " " + lumen::GetNodeId();
}

// Waits for `path` to exist (polled, 60 s at most): a task that runs until
// the test ends it. 1 if it saw the file.
int WaitForFile(std::string path) {
  for (int i = 0; i < 60000 && !std::filesystem::exists(path); ++i) ::usleep(1000);
  return std::filesystem::exists(path) ? 1 : 0;
}

// Throws the first time (it leaves `marker` behind), returns 7 after.
int ThrowsOnce(std::string marker) {
  if (!std::filesystem::exists(marker)) {
    std::ofstream(marker) << "thrown";
    throw std::runtime_error("first attempt");
  }
  return 7;
}

class TimelineTally {
 public:
  static TimelineTally* Create() { return new TimelineTally(); }
  int Add(int x) { return total_ += x; }

 private:
  int total_ = 0;
};

namespace json = boost::json;

// The trace's events, or an empty array when the file does not parse.
json::array ReadTrace(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  boost::system::error_code ec;
  json::value root = json::parse(text.str(), ec);
  if (ec || !root.is_object() || !root.as_object().contains("traceEvents")) return {};
  return root.at("traceEvents").as_array();
}

size_t SlicesNamed(const json::array& trace, const std::string& name) {
  size_t n = 0;
  for (const auto& e : trace) {
    const auto& o = e.as_object();
    if (o.at("ph") == "X" && o.at("name") == name.c_str() && o.at("args").at("status") == "FINISHED") ++n;
  }
  return n;
}

}  // namespace

// The statuses of the task slices named `name`, in the trace's order.
std::vector<std::string> SliceStatuses(const json::array& trace, const std::string& name) {
  std::vector<std::string> statuses;
  for (const auto& e : trace) {
    const auto& o = e.as_object();
    if (o.at("ph") == "X" && o.at("name") == name.c_str() && o.contains("args") &&
        o.at("args").as_object().contains("status")) {
      statuses.emplace_back(o.at("args").at("status").as_string());
    }
  }
  return statuses;
}

LUMEN_REMOTE(WhereAmI, WaitForFile, ThrowsOnce, TimelineTally::Create, &TimelineTally::Add);

using lumen::test::RunCommand;

namespace {

// Runs `lumen timeline FILE` against the head at `address`: false when it
// fails; else `trace` holds the trace it wrote. `out` gets its output.
bool WriteTimeline(const std::string& address, const std::string& file, json::array* trace,
                   std::string* out) {
  if (RunCommand(std::string(LUMEN_CLI_PATH) + " timeline " + file + " --address " + address,
                 out) != 0) {
    return false;
  }
  *trace = ReadTrace(file);
  return true;
}

// "<temp folder>/<stem>-<this process's pid>": a test's own files start so.
std::string TempBase(const std::string& stem) {
  return (std::filesystem::temp_directory_path() / (stem + "-" + std::to_string(::getpid())))
      .string();
}

}  // namespace
using lumen::test::WaitUntil;

// Invariant: every task that ran appears once in the timeline, as a slice named
// after its function on the row of the worker process that ran it, under the
// process row of that worker's node, with its phases and a flow arrow from
// its submitter; actor calls likewise.
TEST_CASE("lumen timeline writes one slice per task on its worker's row, per node") {
  lumen::test::MultiNodeCluster cluster({{.resources = {{"CPU", 1}}}, {.resources = {{"CPU", 1}}}},
                                        {{"LUMEN_TASK_EVENT_FLUSH_PERIOD_MS", "100"}});
  constexpr int kTasks = 12;
  std::vector<lumen::ObjectRef<std::string>> refs;
  for (int i = 0; i < kTasks; ++i) {
    refs.push_back(lumen::Task(WhereAmI).SetSchedulingStrategy(lumen::Spread()).Remote(30));
  }
  std::multiset<std::string> ran;  // "<pid> <node>" per task
  for (auto& ref : refs) ran.insert(*lumen::Get(ref));
  auto tally = lumen::Actor(TimelineTally::Create).Remote();
  for (int i = 1; i <= 3; ++i) REQUIRE(*lumen::Get(tally.Task(&TimelineTally::Add).Remote(i)) == i * (i + 1) / 2);

  std::string file = (std::filesystem::temp_directory_path() /
                      ("lumen-timeline-test-" + std::to_string(::getpid()) + ".json"))
                         .string();
  json::array trace;
  std::string out;
  // The processes flush their events every 100 ms: ask until all are there.
  bool complete = WaitUntil([&] {
    if (!WriteTimeline(cluster.head_address(), file, &trace, &out)) return false;
    return SlicesNamed(trace, "WhereAmI") >= kTasks && SlicesNamed(trace, "&TimelineTally::Add") >= 3 &&
           !SliceStatuses(trace, "TimelineTally::Create").empty();
  });
  std::filesystem::remove(file);
  INFO(out);
  INFO("finished WhereAmI slices: " << SlicesNamed(trace, "WhereAmI") << " of " << kTasks
                                    << ", finished &TimelineTally::Add slices: " << SlicesNamed(trace, "&TimelineTally::Add") << " of 3");
  REQUIRE(complete);
  CHECK(out.find("Wrote ") != std::string::npos);
  CHECK(SlicesNamed(trace, "WhereAmI") == kTasks);
  CHECK(SlicesNamed(trace, "&TimelineTally::Add") == 3);
  // The actor's creation ran once (no FINISHED: its owner records what its
  // reply carried).
  CHECK(SliceStatuses(trace, "TimelineTally::Create") == std::vector<std::string>{"RETURNED"});

  // Row names: trace pid -> node, (pid, tid) -> thread name.
  std::map<int64_t, std::string> node_of_row;
  std::map<std::pair<int64_t, int64_t>, std::string> thread_name;
  for (const auto& e : trace) {
    const auto& o = e.as_object();
    if (o.at("ph") != "M") continue;
    std::string name(o.at("args").at("name").as_string());
    if (o.at("name") == "process_name") node_of_row[o.at("pid").as_int64()] = name;
    if (o.at("name") == "thread_name") {
      thread_name[{o.at("pid").as_int64(), o.at("tid").as_int64()}] = name;
    }
  }
  CHECK(node_of_row.size() == 2);

  // Each task's slice sits on the row of the worker that ran it, on its node.
  std::multiset<std::string> seen;
  size_t flows_out = 0, flows_in = 0;
  for (const auto& e : trace) {
    const auto& o = e.as_object();
    if (o.at("ph") == "s") ++flows_out;
    if (o.at("ph") == "f") ++flows_in;
    if (o.at("ph") != "X" || o.at("name") != "WhereAmI") continue;
    int64_t row = o.at("pid").as_int64(), tid = o.at("tid").as_int64();
    REQUIRE(node_of_row.contains(row));
    CHECK(thread_name[{row, tid}] == "worker pid " + std::to_string(tid));
    seen.insert(std::to_string(tid) + " " + node_of_row[row].substr(5));
    const auto& args = o.at("args").as_object();
    CHECK(args.at("execution_ms").to_number<double>() >= 25.0);
    CHECK(args.at("dependency_wait_ms").is_number());
    CHECK(args.at("lease_wait_ms").is_number());
    CHECK(args.at("kind") == "task");
  }
  // The same (worker pid, node) pairs as the tasks reported, node ids shortened.
  std::multiset<std::string> expected;
  for (const auto& r : ran) {
    auto space = r.find(' ');
    expected.insert(r.substr(0, space) + " " + r.substr(space + 1, 12));
  }
  CHECK(seen == expected);
  CHECK(flows_out == flows_in);
  CHECK(flows_out >= kTasks + 3);
}

// Invariant: a task's worker events travel with its result, so a task still
// running must be recorded by its worker at a flush: the timeline shows it
// as RUNNING on its worker's row while it runs, and once it ends, exactly one
// slice for it (the worker's STARTED and the owner's FINISHED, never a second
// copy carried by the reply), FINISHED, with its phases.
TEST_CASE("a running task shows in the timeline as running, then once as finished") {
  lumen::test::MultiNodeCluster cluster({{.resources = {{"CPU", 1}}}},
                                        {{"LUMEN_TASK_EVENT_FLUSH_PERIOD_MS", "100"}});
  const std::string base = TempBase("lumen-timeline-running");
  const std::string gate = base + ".gate", file = base + ".json";
  std::filesystem::remove(gate);
  auto ref = lumen::Task(WaitForFile).Remote(gate);
  json::array trace;
  std::string out;
  auto timeline = [&] { return WriteTimeline(cluster.head_address(), file, &trace, &out); };
  const bool running = WaitUntil([&] {
    return timeline() && SliceStatuses(trace, "WaitForFile") == std::vector<std::string>{"RUNNING"};
  });
  INFO(out);
  REQUIRE(running);
  { std::ofstream(gate) << "go"; }
  REQUIRE(*lumen::Get(ref) == 1);
  // The owner's FINISHED and the worker's end (its next flush) both arrive.
  auto ended = [&] {
    for (const auto& e : trace) {
      const auto& o = e.as_object();
      if (o.at("ph") == "X" && o.at("name") == "WaitForFile") {
        return o.at("args").at("result_store_ms").is_number();
      }
    }
    return false;
  };
  const bool finished = WaitUntil([&] {
    return timeline() &&
           SliceStatuses(trace, "WaitForFile") == std::vector<std::string>{"FINISHED"} && ended();
  });
  std::filesystem::remove(gate);
  std::filesystem::remove(file);
  INFO("statuses: " << SliceStatuses(trace, "WaitForFile").size());
  REQUIRE(finished);
  for (const auto& e : trace) {
    const auto& o = e.as_object();
    if (o.at("ph") != "X" || o.at("name") != "WaitForFile") continue;
    CHECK(o.at("args").at("execution_ms").is_number());
    CHECK(o.at("args").at("result_store_ms").is_number());
  }
}

// Invariant: an attempt that threw and ran again (retry_exceptions) keeps its
// slice: its owner records the executor events its reply carried (no
// FINISHED carries them), so the timeline shows the first attempt, which
// returned an error, and the second, FINISHED.
TEST_CASE("a retried attempt keeps its slice in the timeline") {
  lumen::test::MultiNodeCluster cluster({{.resources = {{"CPU", 1}}}},
                                        {{"LUMEN_TASK_EVENT_FLUSH_PERIOD_MS", "100"}});
  const std::string base = TempBase("lumen-timeline-retry");
  const std::string marker = base + ".marker", file = base + ".json";
  std::filesystem::remove(marker);
  REQUIRE(*lumen::Get(lumen::Task(ThrowsOnce).SetRetryExceptions(true).Remote(marker)) == 7);
  json::array trace;
  std::string out;
  const bool both = WaitUntil([&] {
    if (!WriteTimeline(cluster.head_address(), file, &trace, &out)) return false;
    return SliceStatuses(trace, "ThrowsOnce").size() == 2;
  });
  std::filesystem::remove(marker);
  std::filesystem::remove(file);
  INFO(out);
  REQUIRE(both);
  std::map<int64_t, std::string> by_attempt;
  for (const auto& e : trace) {
    const auto& o = e.as_object();
    if (o.at("ph") != "X" || o.at("name") != "ThrowsOnce") continue;
    by_attempt[o.at("args").at("attempt").as_int64()] =
        std::string(o.at("args").at("status").as_string());
    CHECK(o.at("args").at("execution_ms").is_number());
  }
  CHECK(by_attempt == std::map<int64_t, std::string>{{0, "RETURNED"}, {1, "FINISHED"}});
}
