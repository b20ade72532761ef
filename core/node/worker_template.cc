#include "lumen/node/worker_template.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "lumen/common/task_event_clock.h"
#include "lumen/common/timeouts.h"

namespace lumen::node {
namespace {

// One fork request, as the daemon sent it.
struct Request {
  int oom_score_adj = 0;
  std::vector<std::pair<std::string, std::string>> env;
  std::vector<int> fds;  // stdout, stderr (or none)
};

// The number of threads of this process (/proc/self/status), or -1.
int CountThreads() {
  std::ifstream status("/proc/self/status");
  std::string key;
  while (status >> key) {
    if (key == "Threads:") {
      int n = -1;
      status >> n;
      return n;
    }
    status.ignore(1 << 16, '\n');
  }
  return -1;
}

void Reply(int fd, const std::string& message) {
  ssize_t n;
  do {
    n = ::send(fd, message.data(), message.size(), MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
}

// Receives one request; false when the daemon closed its end (or it broke).
bool Receive(int fd, Request* request) {
  static char buf[1 << 16];
  iovec iov{buf, sizeof(buf)};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 2)];
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  ssize_t n;
  do {
    n = ::recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n <= 0) return false;
  *request = Request{};
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int received;
      std::memcpy(&received, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      request->fds.push_back(received);
    }
  }
  // "<oom>\0<nfds>\0" then KEY\0VALUE\0 pairs.
  std::vector<std::string_view> fields;
  std::string_view rest(buf, static_cast<size_t>(n));
  while (!rest.empty()) {
    size_t end = rest.find('\0');
    if (end == std::string_view::npos) end = rest.size();
    fields.push_back(rest.substr(0, end));
    rest.remove_prefix(std::min(end + 1, rest.size()));
  }
  if (fields.size() < 2 || !absl::SimpleAtoi(std::string(fields[0]), &request->oom_score_adj)) return true;
  for (size_t i = 2; i + 1 < fields.size(); i += 2) {
    request->env.emplace_back(std::string(fields[i]), std::string(fields[i + 1]));
  }
  return true;
}

// In the forked worker: becomes the node daemon's child and takes the
// request's settings, as SpawnProcess's child and exec would give them.
void BecomeWorker(int server_fd, pid_t daemon, pid_t middle, const char* name,
                  const Request& request) {
  ::close(server_fd);
  ::prctl(PR_SET_NAME, name);  // the binary's name again, as an exec'd worker has it
  // The middle process exits right after forking us (possibly before this
  // line runs): wait (bounded, as long as the daemon waits for the template's
  // answer: Timeouts::fork_server_reply_timeout, from the environment the
  // template inherited) until the daemon, a child subreaper, adopted us.
  const auto deadline =
      std::chrono::steady_clock::now() + Timeouts::FromEnv().fork_server_reply_timeout;
  while (::getppid() == middle && std::chrono::steady_clock::now() < deadline) ::usleep(20);
  if (::getppid() != daemon) ::_exit(127);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != daemon) ::_exit(127);  // the daemon died before the line above
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  if (request.fds.size() == 2) {
    ::dup2(request.fds[0], STDOUT_FILENO);
    ::dup2(request.fds[1], STDERR_FILENO);
    for (int fd : request.fds) {
      if (fd > STDERR_FILENO) ::close(fd);
    }
  }
  for (const auto& [key, value] : request.env) ::setenv(key.c_str(), value.c_str(), 1);
  ::unsetenv(kForkServerFdEnv);
  if (std::getenv(kTemplateBindNowEnv) != nullptr) {
    ::unsetenv("LD_BIND_NOW");
    ::unsetenv(kTemplateBindNowEnv);
  }
  std::string oom = std::to_string(request.oom_score_adj);
  int fd = ::open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
  if (fd >= 0) {
    ssize_t ignored = ::write(fd, oom.data(), oom.size());
    (void)ignored;
    ::close(fd);
  }
}

// What one fork of a worker gave, in the template (is_worker false) or in
// the new worker (is_worker true).
struct WorkerFork {
  bool is_worker = false;
  pid_t middle = -1;  // the middle process (the worker's parent until it exits)
  pid_t worker = -1;  // in the template, vfork middle only: the worker's pid, or -1
  int error = 0;      // errno of the failed fork when worker or middle is -1
};

// LUMEN_WORKER_FORK_VFORK=0: the middle process is a full fork of the
// template (as before stop 27; kept for A/B runs and as a fallback).
bool VforkMiddleEnabled() {
  const char* v = std::getenv("LUMEN_WORKER_FORK_VFORK");
  return v == nullptr || std::string_view(v) != "0";
}

// The worker and the middle's exit status travel through this memory: the
// vfork'ed middle shares the template's, and the template runs again only
// once the middle has exited.
volatile pid_t vfork_worker_pid = -1;
volatile int vfork_worker_errno = 0;
volatile pid_t vfork_middle_pid = -1;  // the worker reads its copy: its first parent

// The middle is vfork'ed: it shares the template's memory (no page tables
// copied, none torn down at its exit) while the template is suspended, and
// forks the worker with glibc's fork (so pthread_atfork handlers, the
// thread id glibc caches, the robust-futex list and malloc's locks are
// handled as for any fork), then exits, so the worker is adopted by the
// node daemon (a child subreaper) as before. Returns 0 in the worker, the
// middle's pid (or -1) in the template. noinline and nothing live across
// vfork but the return value: the middle writes only stack below this
// frame and the two globals above, which the template reads after it
// resumed.
__attribute__((noinline)) pid_t VforkMiddle() {
  vfork_worker_pid = -1;
  vfork_worker_errno = 0;
  pid_t middle = ::vfork();
  if (middle != 0) return middle;  // the template (or -1)
  vfork_middle_pid = ::getpid();
  pid_t worker = ::fork();
  if (worker == 0) return 0;  // the worker: its own copy of the memory from here on
  vfork_worker_errno = worker < 0 ? errno : 0;
  vfork_worker_pid = worker;
  ::_exit(0);
}

WorkerFork ForkThroughVforkedMiddle() {
  WorkerFork forked;
  pid_t result = VforkMiddle();
  if (result == 0) {
    forked.is_worker = true;
    forked.middle = vfork_middle_pid;
    return forked;
  }
  forked.middle = result;
  if (result < 0) {
    forked.error = errno;
    return forked;
  }
  forked.worker = vfork_worker_pid;
  forked.error = vfork_worker_errno;
  return forked;
}

// The middle is a full fork of the template; it replies with the worker's
// pid itself.
WorkerFork ForkThroughForkedMiddle(int fd) {
  WorkerFork forked;
  forked.middle = ::fork();
  if (forked.middle < 0) {
    forked.error = errno;
    return forked;
  }
  if (forked.middle != 0) return forked;
  const pid_t middle_pid = ::getpid();
  pid_t worker = ::fork();
  if (worker == 0) {
    forked.is_worker = true;
    forked.middle = middle_pid;
    return forked;
  }
  Reply(fd, worker > 0 ? absl::StrCat("pid ", worker)
                       : absl::StrCat("error fork: ", std::strerror(errno)));
  ::_exit(0);
}

}  // namespace

void MaybeServeWorkerForks() {
  const char* role = std::getenv("LUMEN_ROLE");
  if (role == nullptr || std::strcmp(role, kWorkerTemplateRole) != 0) return;
  int fd = -1;
  const char* fd_text = std::getenv(kForkServerFdEnv);
  if (fd_text == nullptr || !absl::SimpleAtoi(fd_text, &fd) || fd < 0) {
    std::fprintf(stderr, "lumen: a worker template without %s\n", kForkServerFdEnv);
    std::_Exit(1);
  }
  ::fcntl(fd, F_SETFD, FD_CLOEXEC);  // never into a program a worker execs
  const pid_t daemon = ::getppid();
  // A thread of this process would not exist in the forked workers (and any
  // lock it held would stay held there): only a single-threaded process forks.
  if (int threads = CountThreads(); threads != 1) {
    Reply(fd, absl::StrCat("refused: ", threads,
                           " threads at lumen::Init (a worker template forks only when it has one)"));
    std::_Exit(1);
  }
  // `ps` and tests tell the template from its workers by its name.
  static char name[16] = {0};
  ::prctl(PR_GET_NAME, name);
  ::prctl(PR_SET_NAME, kWorkerTemplateProcessName);
  // Decided once here instead of in every worker: whether task events are
  // stamped with the TSC (a CPUID, which traps to the hypervisor in a VM:
  // ~8% of a forked worker's user time before stop 27). It reads
  // LUMEN_TASK_EVENT_TSC, which the template has as its workers do (the
  // daemon sets it for neither per worker).
  (void)TaskEventClock::UsesTsc();
  // Output buffered so far would otherwise be written once per worker.
  std::fflush(nullptr);
  Reply(fd, "ready");
  const bool vfork_middle = VforkMiddleEnabled();
  while (true) {
    Request request;
    if (!Receive(fd, &request)) std::_Exit(0);  // the daemon closed its end
    WorkerFork forked = vfork_middle ? ForkThroughVforkedMiddle() : ForkThroughForkedMiddle(fd);
    if (forked.is_worker) {
      BecomeWorker(fd, daemon, forked.middle, name, request);
      return;
    }
    if (vfork_middle || forked.middle < 0) {
      Reply(fd, forked.worker > 0 ? absl::StrCat("pid ", forked.worker)
                                  : absl::StrCat("error fork: ", std::strerror(forked.error)));
    }
    for (int received : request.fds) ::close(received);
    if (forked.middle > 0) {
      while (::waitpid(forked.middle, nullptr, 0) < 0 && errno == EINTR) {
      }
    }
  }
}

}  // namespace lumen::node
