// ConfigureMutexDeadlockDetection (lumen/common/mutex_mode.h): whether
// absl::Mutex's lock-order check runs, seen through what it does to a lock
// order inversion (Abseil's detection aborts the process on one). Each case
// runs the inversion in a forked child and reads how the child ended.
#include "lumen/common/mutex_mode.h"

#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>

#include "absl/synchronization/mutex.h"

namespace {

// Forks; the child sets LUMEN_MUTEX_DEADLOCK_DETECTION to `env` (nullptr:
// unset), configures, locks a then b, then b then a (one thread: no real
// deadlock, only an inverted order), and exits 0. Returns the child's status.
int InvertInChild(const char* env) {
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    if (env != nullptr) {
      ::setenv("LUMEN_MUTEX_DEADLOCK_DETECTION", env, 1);
    } else {
      ::unsetenv("LUMEN_MUTEX_DEADLOCK_DETECTION");
    }
    lumen::ConfigureMutexDeadlockDetection();
    // Detection's report goes to stderr: keep the test's output clean.
    std::freopen("/dev/null", "w", stderr);
    auto* a = new absl::Mutex;
    auto* b = new absl::Mutex;
    a->Lock();
    b->Lock();
    b->Unlock();
    a->Unlock();
    b->Lock();
    a->Lock();
    a->Unlock();
    b->Unlock();
    std::_Exit(0);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  return status;
}

}  // namespace

TEST_CASE("mutex deadlock detection is off in release builds and follows the environment") {
  // Invariant: with LUMEN_MUTEX_DEADLOCK_DETECTION=0 no lock-order check runs
  // (an inversion passes); with =1 it runs wherever Abseil was built with its
  // debug checks (an inversion aborts); unset, a build with NDEBUG does not
  // check (the per-lock cost on the task path, issue 13).
  int off = InvertInChild("0");
  CHECK(WIFEXITED(off));
  CHECK(WEXITSTATUS(off) == 0);
  int unset = InvertInChild(nullptr);
#ifdef NDEBUG
  CHECK(WIFEXITED(unset));
  CHECK(WEXITSTATUS(unset) == 0);
#endif
  int on = InvertInChild("1");
  // Abseil compiled without its debug checks never aborts; Debian's has them.
  INFO("status with detection on: " << on);
  if (!(WIFEXITED(on) && WEXITSTATUS(on) == 0)) CHECK(WIFSIGNALED(on));
}
