// Worker output (doc/observability.md, "Logs"): what a job's workers write to
// stdout and stderr reaches its driver's terminal with a prefix naming the
// task or actor, pid and node, and each worker's files in the session
// directory; `lumen logs` prints the files; `lumen stop` removes them. And a
// short job's task events outlive its Shutdown.
// The driver is test/core/log_driver.cc, run as its own process so that its
// real stdout and stderr are what is checked.
#include <unistd.h>

#include <boost/json.hpp>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include "test/core/test_support.h"

namespace {

using lumen::test::RunCommand;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

struct DriverRun {
  std::string output;  // stdout and stderr
  std::string task_pid, actor_pid;
};

DriverRun RunDriver(const std::string& args) {
  DriverRun run;
  int rc = RunCommand(std::string("LUMEN_ADDRESS=auto '") + LUMEN_LOG_DRIVER_PATH + "' " + args,
                      &run.output);
  INFO(run.output);
  REQUIRE(rc == 0);
  std::smatch m;
  REQUIRE(std::regex_search(run.output, m, std::regex("driver-done task_pid=(\\d+) actor_pid=(\\d+)")));
  run.task_pid = m[1];
  run.actor_pid = m[2];
  return run;
}

}  // namespace

// Invariant: every line a task or actor prints reaches the driver exactly as
// printed, after "(NAME pid=PID, node=NODE) " with the task's function or the
// actor's name and the pid of the worker that ran it, and lands in that
// worker's .out/.err file; with log_to_driver off only the files get it.
TEST_CASE("worker output reaches the driver with its prefix and the per-worker files and lumen logs prints them") {
  const std::string cli = LUMEN_CLI_PATH;
  lumen::test::StopClustersAtExit guard(cli);
  auto sessions_before = lumen::test::SessionDirs();
  std::string out;
  REQUIRE(RunCommand(cli + " start --head --num-cpus 2 --object-store-memory 134217728", &out) == 0);
  std::string session;
  for (const auto& s : lumen::test::SessionDirs())
    if (!sessions_before.contains(s)) session = s;
  REQUIRE(!session.empty());

  DriverRun loud = RunDriver("loud");
  INFO(loud.output);
  const std::string node = "node=[0-9a-f]{12}\\) ";
  CHECK(std::regex_search(loud.output, std::regex("\\(Shout pid=" + loud.task_pid + ", " + node +
                                                  "shout-out loud\\n")));
  CHECK(std::regex_search(loud.output, std::regex("\\(Shout pid=" + loud.task_pid + ", " + node +
                                                  "shout-err loud\\n")));
  CHECK(std::regex_search(loud.output, std::regex("\\(narrator-loud pid=" + loud.actor_pid +
                                                  ", " + node + "speaker loud\\n")));
  CHECK(loud.output.find("lumen:task") == std::string::npos);  // markers never show

  // The files of the node (the head's node: its session directory).
  const std::string logs = session + "/logs/worker-";
  CHECK(ReadFile(logs + loud.task_pid + ".out").find("shout-out loud\n") != std::string::npos);
  CHECK(ReadFile(logs + loud.task_pid + ".err").find("shout-err loud\n") != std::string::npos);
  CHECK(ReadFile(logs + loud.actor_pid + ".out").find("speaker loud\n") != std::string::npos);
  CHECK(ReadFile(logs + loud.task_pid + ".out").find("lumen:task") == std::string::npos);

  // log_to_driver = false: nothing forwarded, the files still written.
  DriverRun quiet = RunDriver("quiet hush");
  CHECK(quiet.output.find("shout-out hush") == std::string::npos);
  CHECK(quiet.output.find("shout-err hush") == std::string::npos);
  CHECK(quiet.output.find("speaker hush") == std::string::npos);
  CHECK(ReadFile(logs + quiet.task_pid + ".out").find("shout-out hush\n") != std::string::npos);
  CHECK(ReadFile(logs + quiet.task_pid + ".err").find("shout-err hush\n") != std::string::npos);
  CHECK(ReadFile(logs + quiet.actor_pid + ".out").find("speaker hush\n") != std::string::npos);

  // lumen logs: one worker's files, one actor's, and everything.
  REQUIRE(RunCommand(cli + " logs --worker " + loud.task_pid, &out) == 0);
  INFO(out);
  CHECK(out.find("worker pid " + loud.task_pid + ", stdout") != std::string::npos);
  CHECK(out.find("shout-out loud\n") != std::string::npos);
  CHECK(out.find("shout-err loud\n") != std::string::npos);
  CHECK(out.find("hush") == std::string::npos);
  REQUIRE(RunCommand(cli + " logs --actor narrator-hush", &out) == 0);
  CHECK(out.find("speaker hush\n") != std::string::npos);
  CHECK(out.find("loud") == std::string::npos);
  REQUIRE(RunCommand(cli + " logs", &out) == 0);
  CHECK(out.find("shout-out loud") != std::string::npos);
  CHECK(out.find("speaker hush") != std::string::npos);
  CHECK(RunCommand(cli + " logs --worker 999999999", &out) != 0);
  CHECK(RunCommand(cli + " logs --node zzz", &out) != 0);

  // lumen stop: the session, its logs with it, is gone.
  REQUIRE(RunCommand(cli + " stop", &out) == 0);
  CHECK_FALSE(std::filesystem::exists(session + "/logs"));
}

namespace {

// The FINISHED slices named `name` in a Chrome trace file.
size_t FinishedSlices(const std::string& path, const std::string& name) {
  boost::system::error_code ec;
  boost::json::value root = boost::json::parse(ReadFile(path), ec);
  if (ec || !root.is_object() || !root.as_object().contains("traceEvents")) return 0;
  size_t n = 0;
  for (const auto& e : root.at("traceEvents").as_array()) {
    const auto& o = e.as_object();
    if (o.at("ph") == "X" && o.at("name") == name.c_str() && o.at("args").at("status") == "FINISHED") {
      ++n;
    }
  }
  return n;
}

}  // namespace

// Invariant: the task events of a job that ends within one flush period are
// not lost: Shutdown has the driver's node collect them from the driver and
// from the job's workers (killed when the job ends) before it returns. The
// flush period is a minute here, so only that path can deliver them.
TEST_CASE("the task events of a short job reach lumen timeline after its Shutdown") {
  const std::string cli = LUMEN_CLI_PATH;
  lumen::test::StopClustersAtExit guard(cli);
  std::string out;
  REQUIRE(RunCommand("LUMEN_TASK_EVENT_FLUSH_PERIOD_MS=60000 " + cli +
                         " start --head --num-cpus 2 --object-store-memory 134217728",
                     &out) == 0);
  DriverRun run = RunDriver("brief");
  const std::string trace =
      std::filesystem::temp_directory_path() / ("lumen-logs-test-" + std::to_string(::getpid()) + ".json");
  REQUIRE(RunCommand(cli + " timeline " + trace, &out) == 0);
  INFO(out);
  CHECK(FinishedSlices(trace, "Shout") == 1);
  std::filesystem::remove(trace);
  REQUIRE(RunCommand(cli + " stop", &out) == 0);
}

// Invariant: a driver's Get of many refs that takes over a second draws a
// progress bar when the driver runs on a terminal (here a pseudo-terminal
// from script(1)), and nothing when its stdout is a pipe (a job writing its
// output elsewhere); the result is the same.
TEST_CASE("a long Get of many refs draws a progress bar on a terminal and nothing when stdout is a pipe") {
  const std::string cli = LUMEN_CLI_PATH;
  lumen::test::StopClustersAtExit guard(cli);
  std::string out;
  REQUIRE(RunCommand(cli + " start --head --num-cpus 2 --object-store-memory 134217728", &out) == 0);
  const std::string driver = std::string("LUMEN_ADDRESS=auto '") + LUMEN_LOG_DRIVER_PATH + "' progress";
  std::string on_terminal;
  REQUIRE(RunCommand("script -qec \"" + driver + "\" /dev/null", &on_terminal) == 0);
  INFO(on_terminal);
  CHECK(on_terminal.find("progress-done 40") != std::string::npos);
  CHECK(on_terminal.find("/40 objects ready") != std::string::npos);
  for (const std::string& piped_run : {driver,  // stdout and stderr to a pipe
                                       // stdout to a pipe, stderr still the terminal
                                       "script -qec \"" + driver + " | cat\" /dev/null"}) {
    std::string piped;
    REQUIRE(RunCommand(piped_run, &piped) == 0);
    INFO(piped);
    CHECK(piped.find("progress-done 40") != std::string::npos);
    CHECK(piped.find("objects ready") == std::string::npos);
  }
  REQUIRE(RunCommand(cli + " stop", &out) == 0);
}

// Invariant: output of workers on another node than the driver's reaches the
// driver too (over the connection it opened to that node to lease there),
// named after that node, and `lumen logs --node` finds it there.
TEST_CASE("worker output from another node reaches the driver, named after that node") {
  const std::string cli = LUMEN_CLI_PATH;
  lumen::test::StopClustersAtExit guard(cli);
  std::string out;
  // The driver's node has no CPU: the task and the actor run on the second node.
  REQUIRE(RunCommand(cli + " start --head --num-cpus 0 --object-store-memory 134217728", &out) == 0);
  REQUIRE(RunCommand(cli + " start --address auto --num-cpus 2 --object-store-memory 134217728",
                     &out) == 0);
  DriverRun run = RunDriver("faraway");
  INFO(run.output);
  std::smatch m;
  REQUIRE(std::regex_search(run.output, m,
                            std::regex("\\(Shout pid=" + run.task_pid +
                                       ", node=([0-9a-f]{12})\\) shout-out faraway\\n")));
  const std::string node = m[1];
  CHECK(std::regex_search(run.output, std::regex("\\(narrator-faraway pid=" + run.actor_pid +
                                                 ", node=" + node + "\\) speaker faraway\\n")));
  REQUIRE(RunCommand(cli + " logs --node " + node + " --worker " + run.task_pid, &out) == 0);
  CHECK(out.find("shout-err faraway\n") != std::string::npos);
  REQUIRE(RunCommand(cli + " stop", &out) == 0);
}
