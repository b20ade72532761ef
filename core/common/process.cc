#include "lumen/common/process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"

#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

extern char** environ;

namespace lumen {

absl::Status MakePipe(int fds[2]) {
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe2: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

void SetCloseOnExec(int fd) {
  int flags = ::fcntl(fd, F_GETFD);
  if (flags >= 0 && !(flags & FD_CLOEXEC)) ::fcntl(fd, F_SETFD, flags | FD_CLOEXEC);
}

std::string SelfExecutablePath() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return "/proc/self/exe";
  buf[n] = '\0';
  return buf;
}

absl::StatusOr<pid_t> SpawnProcess(const SpawnOptions& options) {
  // Everything the child touches is built before fork (async-signal-safety).
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string_view entry(*e);
    bool overridden = false;
    for (const auto& [key, value] : options.env) {
      if (entry.size() > key.size() && entry.substr(0, key.size()) == key &&
          entry[key.size()] == '=') {
        overridden = true;
        break;
      }
    }
    if (!overridden) env_strings.emplace_back(entry);
  }
  for (const auto& [key, value] : options.env) env_strings.push_back(key + "=" + value);
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);

  std::vector<std::string> arg_strings;
  arg_strings.push_back(options.executable);
  for (const auto& a : options.args) arg_strings.push_back(a);
  std::vector<char*> argv;
  for (auto& s : arg_strings) argv.push_back(s.data());
  argv.push_back(nullptr);

  int log_fd = -1;
  if (!options.log_path.empty()) {
    log_fd = ::open(options.log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (log_fd < 0) {
      return absl::InternalError(
          absl::StrCat("cannot open log file ", options.log_path, ": ", std::strerror(errno)));
    }
  }
  std::string oom_value =
      options.oom_score_adj ? std::to_string(*options.oom_score_adj) : std::string();

  // For marking every inherited fd close-on-exec in the child without
  // close_range (kernels before 5.11): the highest fd number to visit.
  long max_fd = ::sysconf(_SC_OPEN_MAX);
  if (max_fd < 0 || max_fd > 65536) max_fd = 65536;

  int error_pipe[2];
  if (auto s = MakePipe(error_pipe); !s.ok()) {
    if (log_fd >= 0) ::close(log_fd);
    return s;
  }
  pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) {
    int err = errno;
    ::close(error_pipe[0]);
    ::close(error_pipe[1]);
    if (log_fd >= 0) ::close(log_fd);
    return absl::InternalError(absl::StrCat("fork: ", std::strerror(err)));
  }
  if (pid == 0) {
    // Child: async-signal-safe calls only until exec.
    if (options.die_with_parent) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(127);
    }
    if (options.new_session) ::setsid();
    sigset_t all;
    sigemptyset(&all);
    ::sigprocmask(SIG_SETMASK, &all, nullptr);
    if (log_fd >= 0) {
      ::dup2(log_fd, STDOUT_FILENO);
      ::dup2(log_fd, STDERR_FILENO);
    }
    if (options.stdout_fd >= 0) ::dup2(options.stdout_fd, STDOUT_FILENO);
    if (options.stderr_fd >= 0) ::dup2(options.stderr_fd, STDERR_FILENO);
    if (options.new_session && !options.log_path.empty()) {
      int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
      if (null_fd >= 0) ::dup2(null_fd, STDIN_FILENO);
    }
    // Only stdio and keep_fds reach the new program: sockets opened without
    // SOCK_CLOEXEC (Asio opens and accepts without it), a store's fds, other
    // clients' connections are closed at exec even when a thread of the
    // parent created them between its fork and our exec.
    if (::syscall(SYS_close_range, 3u, ~0u, CLOSE_RANGE_CLOEXEC) != 0) {
      for (long fd = 3; fd < max_fd; ++fd) {
        int flags = ::fcntl(static_cast<int>(fd), F_GETFD);
        if (flags >= 0 && !(flags & FD_CLOEXEC)) ::fcntl(static_cast<int>(fd), F_SETFD, flags | FD_CLOEXEC);
      }
    }
    for (int fd : options.keep_fds) {
      int flags = ::fcntl(fd, F_GETFD);
      if (flags >= 0) ::fcntl(fd, F_SETFD, flags & ~FD_CLOEXEC);
    }
    if (!oom_value.empty()) {
      int fd = ::open("/proc/self/oom_score_adj", O_WRONLY);
      if (fd >= 0) {
        ssize_t ignored = ::write(fd, oom_value.data(), oom_value.size());
        (void)ignored;
        ::close(fd);
      }
    }
    ::execve(argv[0], argv.data(), envp.data());
    int err = errno;
    ssize_t ignored = ::write(error_pipe[1], &err, sizeof(err));
    (void)ignored;
    ::_exit(127);
  }
  ::close(error_pipe[1]);
  if (log_fd >= 0) ::close(log_fd);
  int child_errno = 0;
  ssize_t n;
  do {
    n = ::read(error_pipe[0], &child_errno, sizeof(child_errno));
  } while (n < 0 && errno == EINTR);
  ::close(error_pipe[0]);
  if (n == sizeof(child_errno)) {
    ::waitpid(pid, nullptr, 0);
    return absl::InternalError(absl::StrCat("cannot execute ", options.executable, ": ",
                                            std::strerror(child_errno)));
  }
  return pid;
}

bool WaitForChildExit(pid_t pid, int timeout_ms) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  auto pause = std::chrono::microseconds(100);
  while (true) {
    pid_t r = ::waitpid(pid, nullptr, WNOHANG);
    if (r == pid || (r < 0 && errno == ECHILD)) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    // Polling a child's exit: there is no fd to wait on without a SIGCHLD handler,
    // and this runs only at shutdown.
    std::this_thread::sleep_for(pause);
    if (pause < std::chrono::milliseconds(5)) pause *= 2;
  }
}

bool ProcessAlive(pid_t pid) {
  if (pid <= 0) return false;
  if (::kill(pid, 0) != 0) return errno == EPERM;
  // A zombie still answers kill(0); check its state.
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  auto close_paren = line.rfind(')');
  if (close_paren == std::string::npos || close_paren + 2 >= line.size()) return true;
  return line[close_paren + 2] != 'Z';
}

std::string ReadProcFile(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  std::string text;
  char buffer[4096];
  ssize_t n;
  while ((n = ::read(fd, buffer, sizeof buffer)) > 0) text.append(buffer, static_cast<size_t>(n));
  ::close(fd);
  return n < 0 ? std::string() : text;
}

std::string TempRoot() {
  const char* env = std::getenv("TMPDIR");
  std::string tmp = env != nullptr ? env : "";
  if (tmp.empty()) tmp = "/tmp";
  while (tmp.size() > 1 && tmp.back() == '/') tmp.pop_back();
  return tmp;
}

}  // namespace lumen
