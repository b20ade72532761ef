#include "core/node/process_launcher.h"

#include <signal.h>
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "lumen/common/head_client.h"
#include "lumen/common/log_markers.h"
#include "lumen/common/process.h"

namespace lumen::node {

std::vector<std::pair<std::string, std::string>> WorkerEnvironment(const PosixLauncherOptions& options,
                                                                   const WorkerLaunch& launch) {
  std::vector<std::pair<std::string, std::string>> env = {
      {"LUMEN_ROLE", "worker"},
      {"LUMEN_NODE_SOCKET", options.socket_path},
      {"LUMEN_NODE_HOST", options.host},
      {"LUMEN_SESSION_DIR", options.session_dir},
      {"LUMEN_WORKER_ID", launch.worker.IsNil() ? "" : launch.worker.Hex()},
      {"LUMEN_JOB_ID", launch.job.IsNil() ? "" : launch.job.Hex()},
      {"LUMEN_PARENT_FD", ""},
      {"LUMEN_READY_FD", ""},
      {"LUMEN_ADDRESS", ""},
      {"LUMEN_HEAD_ADDRESS", options.head_address},
      {"LUMEN_TOKEN", runtime::HeadToken()}};
  if (options.on_output) env.emplace_back(kLogMarkersEnv, "1");
  return env;
}

absl::StatusOr<pid_t> PosixProcessLauncher::Launch(const WorkerLaunch& launch) {
  SpawnOptions spawn;
  spawn.executable = launch.executable;
  spawn.env = WorkerEnvironment(options_, launch);
  spawn.die_with_parent = true;
  spawn.oom_score_adj = 500;  // workers go before daemons under memory pressure
  int out[2] = {-1, -1}, err[2] = {-1, -1};
  if (options_.on_output) {
    if (auto s = MakePipe(out); !s.ok()) return s;
    if (auto s = MakePipe(err); !s.ok()) {
      ::close(out[0]);
      ::close(out[1]);
      return s;
    }
    spawn.stdout_fd = out[1];
    spawn.stderr_fd = err[1];
  }
  absl::StatusOr<pid_t> pid = absl::UnavailableError("no fork server");
  if (options_.forker != nullptr) {
    // The fork server's template of this binary, when it has one ready; an
    // exec otherwise (the same environment either way).
    pid = options_.forker->Fork({.executable = spawn.executable,
                                 .env = spawn.env,
                                 .stdout_fd = spawn.stdout_fd,
                                 .stderr_fd = spawn.stderr_fd,
                                 .oom_score_adj = *spawn.oom_score_adj});
  }
  if (pid.ok()) {
    ++num_forked_;
  } else if (!absl::IsAborted(pid.status())) {
    pid = SpawnProcess(spawn);
  }  // Aborted: the template may have forked it; no second process with its id
  if (!options_.on_output) return pid;
  ::close(out[1]);
  ::close(err[1]);
  if (!pid.ok()) {
    ::close(out[0]);
    ::close(err[0]);
    return pid;
  }
  options_.on_output(*pid, launch.job, out[0], err[0]);
  return pid;
}

void PosixProcessLauncher::Kill(pid_t pid) { ::kill(pid, SIGKILL); }

bool PosixProcessLauncher::IsExiting(pid_t pid) {
  // /proc/<pid>/stat: the state after the command name, and the kernel's
  // PF_EXITING flag.
  std::string stat = ReadProcFile(absl::StrCat("/proc/", pid, "/stat"));
  size_t comm_end = stat.rfind(')');
  if (comm_end == std::string::npos) return true;  // gone
  std::istringstream fields(stat.substr(comm_end + 1));
  std::string state;
  unsigned long ppid = 0, pgrp = 0, session = 0, tpgid = 0, flags = 0;
  long tty = 0;
  fields >> state >> ppid >> pgrp >> session >> tty >> tpgid >> flags;
  constexpr unsigned long kPfExiting = 0x4;
  return state == "Z" || state == "X" || (flags & kPfExiting) != 0;
}

bool PosixProcessLauncher::IsAlive(pid_t pid) { return ProcessAlive(pid); }

std::vector<ProcessExit> PosixProcessLauncher::Reap() {
  std::vector<ProcessExit> exits;
  while (true) {
    int status = 0;
    pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid <= 0) break;
    exits.push_back(ProcessExit{pid, status});
  }
  return exits;
}

std::string DescribeExit(int status, const std::string& kill_reason) {
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    if (sig == SIGKILL) {
      if (!kill_reason.empty()) {
        return absl::StrCat("killed by SIGKILL from its node daemon (", kill_reason, ")");
      }
      return "killed by SIGKILL (possibly the out-of-memory killer)";
    }
    const char* abbrev = ::sigabbrev_np(sig);
    if (abbrev == nullptr) return absl::StrCat("killed by signal ", sig);
    return absl::StrCat("killed by signal ", sig, " (SIG", abbrev, ")");
  }
  if (WIFEXITED(status)) return absl::StrCat("exited with code ", WEXITSTATUS(status));
  return absl::StrCat("ended with wait status ", status);
}

}  // namespace lumen::node
