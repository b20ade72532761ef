// The worker fork server with real processes: templates of a probe binary
// (worker_template_probe.cc) fork "workers" that report what they got; and
// the process launcher's choice between the fork server and exec (a fake
// forker).
#include "core/node/worker_fork_server.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

#include "core/node/process_launcher.h"
#include "lumen/common/ids.h"
#include "lumen/common/process.h"
#include "lumen/node/worker_template.h"

namespace lumen::node {
namespace {

using Clock = std::chrono::steady_clock;

// Forks through `server`, retrying while its template starts (Unavailable),
// for at most 20 s. Returns the last result.
absl::StatusOr<pid_t> ForkWhenReady(WorkerForkServer& server, const ForkRequest& request) {
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  absl::StatusOr<pid_t> pid = server.Fork(request);
  while (!pid.ok() && absl::IsUnavailable(pid.status()) && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    pid = server.Fork(request);
  }
  return pid;
}

// Everything written to `fd` until EOF (or 20 s), as key=value lines.
std::map<std::string, std::string> ReadReport(int fd) {
  std::string text;
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  char buf[4096];
  while (Clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n <= 0) break;
    text.append(buf, static_cast<size_t>(n));
  }
  std::map<std::string, std::string> report;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    size_t eq = line.find('=');
    if (eq != std::string::npos) report[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return report;
}

// Forks one probe worker with `env` and returns its report and exit code.
struct Forked {
  pid_t pid = 0;
  std::map<std::string, std::string> report;
  int exit_code = -1;
};
Forked ForkProbe(WorkerForkServer& server, const std::string& exe,
                 std::vector<std::pair<std::string, std::string>> env, int oom = 321) {
  int out[2];
  REQUIRE(::pipe(out) == 0);
  absl::StatusOr<pid_t> pid = ForkWhenReady(
      server, {.executable = exe, .env = std::move(env), .stdout_fd = out[1], .stderr_fd = out[1],
               .oom_score_adj = oom});
  ::close(out[1]);
  INFO("fork: " << pid.status());
  REQUIRE(pid.ok());
  Forked forked;
  forked.pid = *pid;
  forked.report = ReadReport(out[0]);
  ::close(out[0]);
  int status = 0;
  // The worker is our child (adopted from the template's middle process).
  REQUIRE(::waitpid(*pid, &status, 0) == *pid);
  if (WIFEXITED(status)) forked.exit_code = WEXITSTATUS(status);
  return forked;
}

std::string Comm(pid_t pid) {
  std::string comm;
  std::ifstream(absl::StrCat("/proc/", pid, "/comm")) >> comm;
  return comm;
}

TEST_CASE("a worker forked from a template gets the request's environment and is our child",
          "[fork_server]") {
  // Invariant: a forked worker has the environment the request names (its
  // role, worker id; the template's socket variable and LD_BIND_NOW gone), the request's
  // oom_score_adj, the binary's own process name, this process as its parent
  // (so waitpid reports its exit code), and ids different from its
  // sibling's even though the template drew ids before forking; one template
  // serves both, and it is named lumen-template.
  WorkerForkServer server({.template_env = {{"LUMEN_ROLE", "worker"}}});
  const std::string exe = LUMEN_TEMPLATE_PROBE_PATH;
  const WorkerId first_id = WorkerId::Random();
  Forked first = ForkProbe(server, exe, {{"LUMEN_ROLE", "worker"}, {"LUMEN_WORKER_ID", first_id.Hex()}});
  CHECK(first.exit_code == 0);
  CHECK(first.report["role"] == "worker");
  CHECK(first.report["worker"] == first_id.Hex());
  CHECK(first.report["fd"] == "unset");
  CHECK(first.report["bindnow"] == "unset");  // the template's LD_BIND_NOW is not the worker's
  CHECK(first.report["ppid"] == std::to_string(::getpid()));
  CHECK(first.report["oom"] == "321");
  CHECK(first.report["name"] == "worker_template");  // the probe's name, 15 bytes of it
  Forked second = ForkProbe(server, exe, {{"LUMEN_ROLE", "worker"}, {"PROBE_EXIT", "7"}}, 400);
  CHECK(second.exit_code == 7);
  CHECK(second.report["oom"] == "400");
  CHECK(!first.report["id"].empty());
  CHECK(first.report["id"] != second.report["id"]);
  CHECK(server.num_forked() == 2);
  CHECK(server.num_templates_started() == 1);
  const pid_t tpid = server.TemplatePid(exe);
  REQUIRE(tpid > 0);
  CHECK(Comm(tpid) == kWorkerTemplateProcessName);
  server.Stop();
  CHECK(!ProcessAlive(tpid));
}

TEST_CASE("a worker gets glibc's fork bookkeeping whether its middle process is vforked or forked",
          "[fork_server]") {
  // Invariant: with either middle process (the default vfork'ed one, or a
  // full fork with LUMEN_WORKER_FORK_VFORK=0) the forked worker ran the
  // pthread_atfork child handler its binary registered before lumen::Init
  // exactly once, glibc's cached thread id is the worker's own, it has a
  // robust-futex list, it is this process's child and exits with its code;
  // and the template keeps serving (two workers in a row).
  for (const char* vfork : {"1", "0"}) {
    INFO("LUMEN_WORKER_FORK_VFORK=" << vfork);
    WorkerForkServer server(
        {.template_env = {{"LUMEN_ROLE", "worker"}, {"LUMEN_WORKER_FORK_VFORK", vfork}}});
    for (int i = 0; i < 2; ++i) {
      Forked worker = ForkProbe(server, LUMEN_TEMPLATE_PROBE_PATH,
                                {{"LUMEN_ROLE", "worker"}, {"PROBE_EXIT", std::to_string(3 + i)}});
      CHECK(worker.exit_code == 3 + i);
      CHECK(worker.report["atfork"] == (std::string_view(vfork) == "1" ? "1" : "2"));
      CHECK(worker.report["tid_ok"] == "1");
      CHECK(worker.report["robust"] == "1");
      CHECK(worker.report["ppid"] == std::to_string(::getpid()));
    }
    CHECK(server.num_forked() == 2);
    CHECK(server.num_templates_started() == 1);
    server.Stop();
  }
}

TEST_CASE("a killed template is restarted, one that is not single-threaded is refused",
          "[fork_server]") {
  // Invariant: after its template is SIGKILLed the next forks are Unavailable
  // (the caller execs) until a new template is ready, then workers are forked
  // again; a template with a second thread at lumen::Init refuses, and after
  // max_failures refusals no template is started again for that binary.
  const std::string exe = LUMEN_TEMPLATE_PROBE_PATH;
  {
    WorkerForkServer server({});
    CHECK(ForkProbe(server, exe, {}).exit_code == 0);
    const pid_t old_template = server.TemplatePid(exe);
    REQUIRE(old_template > 0);
    REQUIRE(::kill(old_template, SIGKILL) == 0);
    REQUIRE(WaitForChildExit(old_template, 10000));
    absl::StatusOr<pid_t> right_after = server.Fork({.executable = exe});
    CHECK(absl::IsUnavailable(right_after.status()));
    Forked again = ForkProbe(server, exe, {{"LUMEN_WORKER_ID", "after-restart"}});
    CHECK(again.exit_code == 0);
    CHECK(again.report["worker"] == "after-restart");
    CHECK(server.TemplatePid(exe) != old_template);
    CHECK(server.num_templates_started() == 2);
  }
  {
    WorkerForkServer server({.template_env = {{"PROBE_THREAD", "1"}}, .max_failures = 3});
    const auto deadline = Clock::now() + std::chrono::seconds(30);
    absl::StatusOr<pid_t> pid = server.Fork({.executable = exe});
    while (Clock::now() < deadline && absl::IsUnavailable(pid.status()) &&
           !absl::StrContains(pid.status().message(), "too often")) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      pid = server.Fork({.executable = exe});
    }
    INFO(pid.status());
    CHECK(absl::StrContains(pid.status().message(), "too often"));
    CHECK(server.num_templates_started() == 3);
    CHECK(server.num_forked() == 0);
    CHECK(server.TemplatePid(exe) == 0);
  }
}

TEST_CASE("a binary changed on disk gets a new template", "[fork_server]") {
  // Invariant: a template runs the binary as it was when it started; once the
  // file changes (here its mtime), the template is retired and the workers
  // come from a new one; Stop leaves no template process.
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    absl::StrCat("lumen-fork-test-", ::getpid());
  std::filesystem::create_directories(dir);
  const std::string exe = (dir / "probe").string();
  std::filesystem::copy_file(LUMEN_TEMPLATE_PROBE_PATH, exe);
  {
    WorkerForkServer server({});
    CHECK(ForkProbe(server, exe, {}).exit_code == 0);
    const pid_t first_template = server.TemplatePid(exe);
    timespec times[2] = {{0, UTIME_OMIT}, {::time(nullptr) + 100, 0}};
    REQUIRE(::utimensat(AT_FDCWD, exe.c_str(), times, 0) == 0);
    CHECK(absl::IsUnavailable(server.Fork({.executable = exe}).status()));
    CHECK(!ProcessAlive(first_template));
    CHECK(ForkProbe(server, exe, {}).exit_code == 0);
    const pid_t second_template = server.TemplatePid(exe);
    CHECK(second_template != first_template);
    CHECK(server.num_templates_started() == 2);
    server.Stop();
    CHECK(!ProcessAlive(second_template));
    CHECK(server.TemplatePid(exe) == 0);
  }
  std::filesystem::remove_all(dir);
}

// A forker that hands out made-up pids, or refuses (Unavailable).
class FakeForker : public WorkerForker {
 public:
  absl::StatusOr<pid_t> Fork(const ForkRequest& request) override {
    requests.push_back(request);
    if (unavailable) return absl::UnavailableError("no template");
    if (maybe_forked) return absl::AbortedError("took the request, then no answer");
    return next_pid++;
  }
  void Stop() override {}
  bool unavailable = false;
  bool maybe_forked = false;
  pid_t next_pid = 4000000;
  std::vector<ForkRequest> requests;
};

std::string EnvValue(const ForkRequest& r, const std::string& key) {
  for (const auto& [k, v] : r.env) {
    if (k == key) return v;
  }
  return "<absent>";
}

TEST_CASE("the launcher forks through the fork server and execs when it has no template",
          "[fork_server]") {
  // Invariant: with a forker, Launch returns the forker's pid and hands it the
  // worker's environment (role, ids, log markers), its output pipes and
  // oom_score_adj 500; when the forker is Unavailable the worker is exec'd
  // (a real process here) and its output pipes still reach on_output.
  FakeForker forker;
  std::vector<std::pair<pid_t, int>> outputs;  // pid, stdout fd
  PosixProcessLauncher launcher({.socket_path = "/tmp/none.sock",
                                 .on_output =
                                     [&](pid_t pid, const JobId&, int out, int err) {
                                       outputs.emplace_back(pid, out);
                                       ::close(err);
                                     },
                                 .forker = &forker});
  const WorkerId worker = WorkerId::Random();
  const JobId job = JobId::Random();
  absl::StatusOr<pid_t> forked = launcher.Launch({worker, job, "/bin/true"});
  REQUIRE(forked.ok());
  CHECK(*forked == 4000000);
  REQUIRE(forker.requests.size() == 1);
  const ForkRequest& r = forker.requests[0];
  CHECK(r.executable == "/bin/true");
  CHECK(EnvValue(r, "LUMEN_ROLE") == "worker");
  CHECK(EnvValue(r, "LUMEN_WORKER_ID") == worker.Hex());
  CHECK(EnvValue(r, "LUMEN_JOB_ID") == job.Hex());
  CHECK(EnvValue(r, "LUMEN_NODE_SOCKET") == "/tmp/none.sock");
  CHECK(EnvValue(r, "LUMEN_LOG_MARKERS") == "1");
  CHECK(r.stdout_fd >= 0);
  CHECK(r.stderr_fd >= 0);
  CHECK(r.oom_score_adj == 500);
  CHECK(launcher.num_forked() == 1);

  forker.unavailable = true;
  absl::StatusOr<pid_t> execd = launcher.Launch({WorkerId::Random(), job, "/bin/true"});
  REQUIRE(execd.ok());
  CHECK(*execd != 4000001);
  int status = 0;
  REQUIRE(::waitpid(*execd, &status, 0) == *execd);  // a real child: /bin/true ran
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(launcher.num_forked() == 1);
  REQUIRE(outputs.size() == 2);
  CHECK(outputs[0].first == 4000000);
  CHECK(outputs[1].first == *execd);
  for (const auto& [pid, fd] : outputs) ::close(fd);
}

TEST_CASE("a worker the template may have forked is not exec'd again under its id",
          "[fork_server]") {
  // Invariant: when the fork server took the request and then died or did not
  // answer (Aborted), the worker may be running: Launch must not exec a second
  // process with the same worker id (both would bind one socket name, and the
  // exit of one would tear down the other's registration); it returns Aborted.
  FakeForker forker;
  forker.maybe_forked = true;
  int outputs = 0;
  PosixProcessLauncher launcher({.socket_path = "/tmp/none.sock",
                                 .on_output =
                                     [&](pid_t, const JobId&, int out, int err) {
                                       ++outputs;
                                       ::close(out);
                                       ::close(err);
                                     },
                                 .forker = &forker});
  absl::StatusOr<pid_t> pid = launcher.Launch({WorkerId::Random(), JobId::Random(), "/bin/true"});
  REQUIRE_FALSE(pid.ok());
  CHECK(absl::IsAborted(pid.status()));
  CHECK(forker.requests.size() == 1);
  CHECK(outputs == 0);  // nothing exec'd
  CHECK(launcher.num_forked() == 0);
}

}  // namespace
}  // namespace lumen::node
