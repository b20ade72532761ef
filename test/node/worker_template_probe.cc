// A stand-in for a job's binary in worker_fork_server_test: started as a
// worker template it serves forks; each forked "worker" prints what it got
// (its environment, parent, oom_score_adj, name, a fresh random id) on its
// stdout and exits 0.
//
// PROBE_THREAD=1 in its environment: it starts a thread before serving (the
// template must refuse). PROBE_EXIT=<code>: a forked worker exits with it.
#include <pthread.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

#include "lumen/common/ids.h"
#include "lumen/node/worker_template.h"

namespace {

std::string EnvOr(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : fallback;
}

std::atomic<int> atfork_child_runs{0};

// 1 when glibc's idea of this thread's id (what pthread_getcpuclockid
// encodes: ~tid << 3 | 2) is the kernel's.
int PthreadTidIsOurs() {
  clockid_t clock;
  if (::pthread_getcpuclockid(::pthread_self(), &clock) != 0) return 0;
  const pid_t glibc_tid = static_cast<pid_t>(~(clock >> 3));
  return glibc_tid == static_cast<pid_t>(::syscall(SYS_gettid)) ? 1 : 0;
}

// 1 when this thread has a robust-futex list registered with the kernel.
int HasRobustList() {
  void* head = nullptr;
  size_t len = 0;
  if (::syscall(SYS_get_robust_list, 0, &head, &len) != 0) return 0;
  return head != nullptr ? 1 : 0;
}

}  // namespace

int main() {
  ::pthread_atfork(nullptr, nullptr, [] { atfork_child_runs.fetch_add(1); });
  // Ids drawn before the fork (as static initialisers might): the forked
  // workers must still draw different ones.
  (void)lumen::WorkerId::Random();
  std::thread extra;
  if (EnvOr("PROBE_THREAD", "") == "1") {
    extra = std::thread([] { std::this_thread::sleep_for(std::chrono::hours(1)); });
    extra.detach();
  }
  lumen::node::MaybeServeWorkerForks();
  // A forked worker from here on.
  std::string oom;
  std::ifstream("/proc/self/oom_score_adj") >> oom;
  char name[16] = {0};
  ::prctl(PR_GET_NAME, name);
  std::printf("atfork=%d\ntid_ok=%d\nrobust=%d\n", atfork_child_runs.load(), PthreadTidIsOurs(),
              HasRobustList());
  std::printf("role=%s\nworker=%s\nfd=%s\nbindnow=%s\nppid=%d\noom=%s\nname=%s\nid=%s\n",
              EnvOr("LUMEN_ROLE", "").c_str(), EnvOr("LUMEN_WORKER_ID", "").c_str(),
              EnvOr("LUMEN_FORK_SERVER_FD", "unset").c_str(), EnvOr("LD_BIND_NOW", "unset").c_str(),
              static_cast<int>(::getppid()),
              oom.c_str(), name, lumen::WorkerId::Random().Hex().c_str());
  std::fflush(stdout);
  return std::atoi(EnvOr("PROBE_EXIT", "0").c_str());
}
