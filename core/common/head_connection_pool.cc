#include "lumen/common/head_connection_pool.h"

#include <poll.h>
#include <pthread.h>
#include <unistd.h>

#include <atomic>

namespace lumen::runtime {
namespace {

// True when nothing can be read from `fd` and it is not hung up: the head has
// neither closed it nor sent anything unasked (an idle connection has no
// reply due, so anything readable means it is no longer usable).
bool StillOpen(int fd) {
  pollfd p{.fd = fd, .events = POLLIN | POLLRDHUP, .revents = 0};
  return ::poll(&p, 1, 0) == 0;
}

// This process's id without a system call per Take and Give (glibc no longer
// caches getpid): set when the pool is made and again in a forked child.
std::atomic<pid_t> self_pid{0};

pid_t Self() { return self_pid.load(std::memory_order_relaxed); }

}  // namespace

HeadConnectionPool& HeadConnectionPool::Instance() {
  static auto* pool = [] {
    self_pid.store(::getpid());
    ::pthread_atfork(nullptr, nullptr, [] { self_pid.store(::getpid()); });
    return new HeadConnectionPool();  // never destroyed (used until exit)
  }();
  return *pool;
}

int HeadConnectionPool::Take(const std::string& address, int64_t* reply_ms, bool* write_checks) {
  if (reply_ms != nullptr) *reply_ms = 0;
  if (write_checks != nullptr) *write_checks = false;
  const pid_t self = Self();
  std::vector<int> stale;
  int fd = -1;
  {
    absl::MutexLock lock(&mu_);
    auto it = idle_.find(address);
    if (it == idle_.end()) return -1;
    auto& idle = it->second;
    while (!idle.empty()) {
      Idle last = idle.back();
      idle.pop_back();
      if (last.owner != self) continue;  // the parent's, inherited over a fork
      // Unpolled only for a taker that handles the failed write.
      const bool unpolled = last.write_checks && write_checks != nullptr;
      if (unpolled || StillOpen(last.fd)) {
        fd = last.fd;
        if (reply_ms != nullptr) *reply_ms = last.reply_ms;
        if (write_checks != nullptr) *write_checks = unpolled;
        break;
      }
      stale.push_back(last.fd);
    }
  }
  for (int s : stale) ::close(s);
  return fd;
}

void HeadConnectionPool::Give(const std::string& address, int fd, int64_t reply_ms,
                              bool write_checks) {
  if (fd < 0) return;
  {
    absl::MutexLock lock(&mu_);
    auto& idle = idle_[address];
    if (idle.size() < kIdlePerAddress) {
      idle.push_back({fd, Self(), reply_ms, write_checks});
      return;
    }
  }
  ::close(fd);
}

void HeadConnectionPool::Clear() {
  const pid_t self = Self();
  std::vector<int> fds;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [address, idle] : idle_) {
      for (const Idle& i : idle) {
        if (i.owner == self) fds.push_back(i.fd);
      }
    }
    idle_.clear();
  }
  for (int fd : fds) ::close(fd);
}

size_t HeadConnectionPool::IdleCount(const std::string& address) {
  absl::MutexLock lock(&mu_);
  auto it = idle_.find(address);
  return it == idle_.end() ? 0 : it->second.size();
}

}  // namespace lumen::runtime
