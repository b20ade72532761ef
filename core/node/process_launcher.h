// ProcessLauncher: how the worker pool starts, signals and reaps worker
// processes. PosixProcessLauncher does it for real (fork/exec of the job's
// binary in worker mode, SIGKILL, waitpid); tests substitute a fake that
// records launches and scripts exits, so the pool and the lease manager run
// without processes.
//
//   PosixProcessLauncher launcher({.socket_path = ..., .host = ..., ...});
//   ASSIGN_OR_RETURN(pid_t pid, launcher.Launch({worker_id, job_id, "/path/to/exe"}));
//   for (const ProcessExit& e : launcher.Reap()) { ... }
//
// Called on the node daemon's io thread only.
#pragma once

#include <sys/types.h>

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lumen/common/ids.h"
#include "core/node/worker_fork_server.h"

namespace lumen::node {

// One worker process to start.
struct WorkerLaunch {
  WorkerId worker;
  JobId job;
  std::string executable;  // the job's binary (or a generic worker)
};

// A child process that ended: its pid and its wait status (as from waitpid).
struct ProcessExit {
  pid_t pid = 0;
  int wait_status = 0;
};

class ProcessLauncher {
 public:
  virtual ~ProcessLauncher() = default;
  // Starts the worker; returns its pid. Errors: the spawn's (a bad path, ...);
  // Aborted when it may have started all the same (a fork server's template
  // took the request and died or did not answer): start it under a new id.
  [[nodiscard]] virtual absl::StatusOr<pid_t> Launch(const WorkerLaunch& launch) = 0;
  // Sends SIGKILL; the process is reaped later through Reap().
  virtual void Kill(pid_t pid) = 0;
  // Whether the process is already on its way out (a zombie, or exiting), so a
  // signal sent now no longer decides how it ends.
  virtual bool IsExiting(pid_t pid) = 0;
  virtual bool IsAlive(pid_t pid) = 0;
  // The children that ended since the last call (non-blocking).
  virtual std::vector<ProcessExit> Reap() = 0;
};

// What a worker process is told about its node (environment variables).
struct PosixLauncherOptions {
  std::string socket_path;   // the daemon's Unix socket
  std::string host;          // the IP workers listen on
  std::string session_dir;
  std::string head_address;
  // When set, each worker's stdout and stderr go to pipes whose read ends are
  // handed here (the callee owns them), right after the spawn; the worker is
  // told to mark its output (lumen/common/log_markers.h). Unset: inherited.
  std::function<void(pid_t pid, const JobId& job, int stdout_fd, int stderr_fd)> on_output;
  // When set, workers are forked from its template of their binary when it
  // has one ready, and exec'd otherwise (borrowed; outlives the launcher).
  WorkerForker* forker = nullptr;
};

// The environment overrides a worker starts with (a nil worker or job id: "").
std::vector<std::pair<std::string, std::string>> WorkerEnvironment(const PosixLauncherOptions& options,
                                                                   const WorkerLaunch& launch);

class PosixProcessLauncher : public ProcessLauncher {
 public:
  explicit PosixProcessLauncher(PosixLauncherOptions options) : options_(std::move(options)) {}
  absl::StatusOr<pid_t> Launch(const WorkerLaunch& launch) override;
  void Kill(pid_t pid) override;
  bool IsExiting(pid_t pid) override;
  bool IsAlive(pid_t pid) override;
  std::vector<ProcessExit> Reap() override;
  // Workers started through the fork server (the rest were exec'd).
  uint64_t num_forked() const { return num_forked_; }

 private:
  PosixLauncherOptions options_;
  uint64_t num_forked_ = 0;
};

// How a child process ended, in words: "killed by signal 11 (SIGSEGV)",
// "exited with code 0". `kill_reason`: why the daemon itself sent SIGKILL, if it did.
std::string DescribeExit(int wait_status, const std::string& kill_reason);

}  // namespace lumen::node
