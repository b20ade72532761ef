// Starting and watching OS processes: the daemons and workers of a cluster.
//
//   lumen::SpawnOptions options;
//   options.executable = "/proc/self/exe";
//   options.env = {{"LUMEN_ROLE", "worker"}};
//   options.die_with_parent = true;
//   absl::StatusOr<pid_t> pid = lumen::SpawnProcess(options);
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace lumen {

struct SpawnOptions {
  std::string executable;
  std::vector<std::string> args;  // argv[1..]; argv[0] is `executable`
  // Added to (or replacing in) the parent's environment.
  std::vector<std::pair<std::string, std::string>> env;
  // Append the child's stdout and stderr to this file; empty: inherit.
  std::string log_path;
  // Or give the child these descriptors as its stdout / stderr (e.g. the write
  // ends of pipes; -1: as above). The caller keeps and closes its own copies.
  int stdout_fd = -1;
  int stderr_fd = -1;
  // SIGKILL the child when the thread that spawned it exits (PR_SET_PDEATHSIG).
  bool die_with_parent = false;
  // Detach into a new session (for daemons started by `lumen start`).
  bool new_session = false;
  // Descriptors that stay open in the child (all others the parent marked
  // close-on-exec are closed by exec).
  std::vector<int> keep_fds;
  std::optional<int> oom_score_adj;
};

// Forks and execs. Safe to call from a multi-threaded process: everything the
// child needs is prepared before fork. Errors: the exec failing is reported
// through a close-on-exec pipe, so a bad path returns an error here.
absl::StatusOr<pid_t> SpawnProcess(const SpawnOptions& options);

// The absolute path of this process's executable.
std::string SelfExecutablePath();

// Waits up to `timeout_ms` for `pid` (a child) to exit; returns true if it did.
bool WaitForChildExit(pid_t pid, int timeout_ms);

// True if a process with this pid exists (and is not a zombie we could see).
bool ProcessAlive(pid_t pid);

// The whole of a small file such as /proc/<pid>/stat, or "" when it cannot be
// opened or read (a process that exits while its file is read fails the read
// with ESRCH; libstdc++'s istreambuf_iterator turns that into an exception).
std::string ReadProcFile(const std::string& path);

// The directory under which session directories live: $TMPDIR or /tmp.
std::string TempRoot();

// Creates a pipe whose both ends are close-on-exec.
[[nodiscard]] absl::Status MakePipe(int fds[2]);

// Marks `fd` close-on-exec (for sockets Asio opens or accepts without
// SOCK_CLOEXEC), so that a program a user task execs does not inherit it.
// Best effort: errors are ignored.
void SetCloseOnExec(int fd);

}  // namespace lumen
