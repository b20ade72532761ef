#include "core/node/worker_fork_server.h"

#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <string_view>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "lumen/common/logging.h"
#include "lumen/common/process.h"
#include "lumen/node/worker_template.h"

namespace lumen::node {
namespace {

struct FileId {
  uint64_t dev = 0, ino = 0, size = 0;
  int64_t mtime_ns = 0;
  bool operator==(const FileId&) const = default;
};

absl::StatusOr<FileId> StatFile(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    return absl::NotFoundError(absl::StrCat("cannot stat ", path, ": ", std::strerror(errno)));
  }
  return FileId{static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino),
                static_cast<uint64_t>(st.st_size),
                static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec};
}

// Sends one message with `fds` attached (none when empty). False on any error.
bool SendWithFds(int fd, const std::string& payload, const std::vector<int>& fds) {
  iovec iov{const_cast<char*>(payload.data()), payload.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 2)];
  if (!fds.empty()) {
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
    cmsg->cmsg_level = SOL_SOCKET;
    cmsg->cmsg_type = SCM_RIGHTS;
    cmsg->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(cmsg), fds.data(), sizeof(int) * fds.size());
  }
  ssize_t n;
  do {
    n = ::sendmsg(fd, &msg, MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  return n == static_cast<ssize_t>(payload.size());
}

}  // namespace

WorkerForkServer::WorkerForkServer(WorkerForkServerOptions options) : options_(std::move(options)) {
  // Forked workers are grandchildren of the node daemon until the template's
  // middle process exits; as a subreaper the daemon then adopts them.
  if (::prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) {
    LUMEN_LOG(WARNING) << "cannot become a child subreaper (" << std::strerror(errno)
                       << "): workers are exec'd";
    subreaper_ = false;
  }
}

WorkerForkServer::~WorkerForkServer() { Stop(); }

bool WorkerForkServer::EnabledByEnv() {
  const char* v = std::getenv("LUMEN_WORKER_FORK_SERVER");
  return v == nullptr || std::string_view(v) != "0";
}

WorkerForkServer::Failures& WorkerForkServer::FailuresOf(const std::string& executable) {
  for (Failures& f : failures_) {
    if (f.executable == executable) return f;
  }
  failures_.push_back({executable, 0, false});
  return failures_.back();
}

pid_t WorkerForkServer::TemplatePid(const std::string& executable) const {
  for (const Template& t : templates_) {
    if (t.executable == executable) return t.pid;
  }
  return 0;
}

absl::Status WorkerForkServer::StartTemplate(const std::string& executable) {
  absl::StatusOr<FileId> file = StatFile(executable);
  if (!file.ok()) return file.status();
  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0) {
    return absl::InternalError(absl::StrCat("socketpair: ", std::strerror(errno)));
  }
  SpawnOptions spawn;
  spawn.executable = executable;
  for (const auto& [key, value] : options_.template_env) {
    if (key != "LUMEN_ROLE" && key != kForkServerFdEnv) spawn.env.emplace_back(key, value);
  }
  spawn.env.emplace_back("LUMEN_ROLE", kWorkerTemplateRole);
  spawn.env.emplace_back(kForkServerFdEnv, std::to_string(pair[1]));
  // Every symbol bound once, in the template: a forked worker inherits the
  // resolved tables instead of resolving each function on its first call
  // (the dynamic loader was ~20% of a forked worker's user time). The
  // workers drop the variable again (it is not the user's).
  if (std::getenv("LD_BIND_NOW") == nullptr) {
    spawn.env.emplace_back("LD_BIND_NOW", "1");
    spawn.env.emplace_back(kTemplateBindNowEnv, "1");
  }
  spawn.keep_fds = {pair[1]};
  spawn.die_with_parent = true;
  spawn.oom_score_adj = 500;  // as its workers: it goes before the daemons
  absl::StatusOr<pid_t> pid = SpawnProcess(spawn);
  ::close(pair[1]);
  if (!pid.ok()) {
    ::close(pair[0]);
    return pid.status();
  }
  Template t;
  t.executable = executable;
  t.pid = *pid;
  t.fd = pair[0];
  t.dev = file->dev;
  t.ino = file->ino;
  t.size = file->size;
  t.mtime_ns = file->mtime_ns;
  templates_.push_front(std::move(t));
  ++num_templates_started_;
  while (templates_.size() > options_.max_templates) {
    Retire(std::prev(templates_.end()), false, "more executables than templates");
  }
  return absl::OkStatus();
}

void WorkerForkServer::Retire(std::list<Template>::iterator it, bool failed, const std::string& why) {
  LUMEN_LOG(DEBUG) << "worker template " << it->pid << " of " << it->executable
                   << " retired: " << why;
  if (failed) {
    Failures& f = FailuresOf(it->executable);
    if (++f.in_a_row >= options_.max_failures && !f.warned) {
      f.warned = true;
      LUMEN_LOG(WARNING) << "worker template of " << it->executable << " failed " << f.in_a_row
                         << " times in a row (last: " << why
                         << "); its workers are exec'd from now on";
    }
  }
  ::close(it->fd);
  ::kill(it->pid, SIGKILL);
  // It is our child: reap it here unless the daemon's SIGCHLD handler did already.
  WaitForChildExit(it->pid, 1000);
  templates_.erase(it);
}

bool WorkerForkServer::CheckReady(std::list<Template>::iterator it) {
  if (it->state == State::kReady) return true;
  char buf[512];
  ssize_t n;
  do {
    n = ::recv(it->fd, buf, sizeof(buf) - 1, MSG_DONTWAIT);
  } while (n < 0 && errno == EINTR);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return false;  // still starting
  if (n <= 0) {
    Retire(it, true, "it exited while starting");
    return false;
  }
  std::string message(buf, static_cast<size_t>(n));
  if (message == "ready") {
    it->state = State::kReady;
    FailuresOf(it->executable).in_a_row = 0;
    return true;
  }
  Retire(it, true, message);
  return false;
}

absl::StatusOr<pid_t> WorkerForkServer::ForkFrom(std::list<Template>::iterator it,
                                                 const ForkRequest& request) {
  std::vector<int> fds;
  if (request.stdout_fd >= 0 && request.stderr_fd >= 0) fds = {request.stdout_fd, request.stderr_fd};
  std::string payload;
  auto field = [&payload](const std::string& text) {
    payload += text;
    payload.push_back('\0');
  };
  field(std::to_string(request.oom_score_adj));
  field(std::to_string(fds.size()));
  for (const auto& [key, value] : request.env) {
    field(key);
    field(value);
  }
  if (!SendWithFds(it->fd, payload, fds)) {
    std::string why = absl::StrCat("cannot send it a request: ", std::strerror(errno));
    Retire(it, true, why);
    return absl::UnavailableError(why);
  }
  // At most reply_timeout in all (a signal does not restart the wait).
  pollfd p{it->fd, POLLIN, 0};
  const auto deadline = std::chrono::steady_clock::now() + options_.reply_timeout;
  int ready;
  do {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    ready = ::poll(&p, 1, static_cast<int>(std::max<int64_t>(0, left.count())));
  } while (ready < 0 && errno == EINTR);
  char buf[512];
  ssize_t n = -1;
  if (ready > 0) {
    do {
      n = ::recv(it->fd, buf, sizeof(buf) - 1, MSG_DONTWAIT);
    } while (n < 0 && errno == EINTR);
  }
  if (n <= 0) {
    std::string why = ready == 0 ? absl::StrCat("no answer within ", options_.reply_timeout.count(), " ms")
                                 : "it exited";
    Retire(it, true, why);
    // It took the request: the worker may run all the same (Aborted, not
    // Unavailable: the caller must not start another under the same id).
    return absl::AbortedError(
        absl::StrCat("the worker template took the request, then ", why, ": it may have forked"));
  }
  std::string reply(buf, static_cast<size_t>(n));
  int pid = 0;
  if (absl::StartsWith(reply, "pid ") && absl::SimpleAtoi(reply.substr(4), &pid) && pid > 0) {
    ++num_forked_;
    return static_cast<pid_t>(pid);
  }
  // A fork that failed in the template (EAGAIN, ENOMEM): the template stays;
  // this worker is exec'd instead.
  return absl::UnavailableError(absl::StrCat("the worker template could not fork: ", reply));
}

absl::StatusOr<pid_t> WorkerForkServer::Fork(const ForkRequest& request) {
  if (!subreaper_) return absl::UnavailableError("not a child subreaper");
  auto it = templates_.begin();
  while (it != templates_.end() && it->executable != request.executable) ++it;
  if (it != templates_.end()) {
    // A binary rebuilt since the template started: its workers must run the new one.
    absl::StatusOr<FileId> now = StatFile(request.executable);
    if (!now.ok() || !(*now == FileId{it->dev, it->ino, it->size, it->mtime_ns})) {
      Retire(it, false, "its binary changed on disk");
      it = templates_.end();
    }
  }
  if (it == templates_.end()) {
    Failures& f = FailuresOf(request.executable);
    if (f.in_a_row >= options_.max_failures) {
      return absl::UnavailableError("its worker template failed too often");
    }
    if (absl::Status s = StartTemplate(request.executable); !s.ok()) {
      ++f.in_a_row;
      return absl::UnavailableError(absl::StrCat("cannot start a worker template: ", s.message()));
    }
    return absl::UnavailableError("its worker template is starting");
  }
  if (it != templates_.begin()) templates_.splice(templates_.begin(), templates_, it);
  it = templates_.begin();
  if (!CheckReady(it)) return absl::UnavailableError("its worker template is starting");
  return ForkFrom(it, request);
}

void WorkerForkServer::Stop() {
  for (Template& t : templates_) {
    ::close(t.fd);
    ::kill(t.pid, SIGKILL);
  }
  for (Template& t : templates_) WaitForChildExit(t.pid, 1000);
  templates_.clear();
}

}  // namespace lumen::node
