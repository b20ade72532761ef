// lumen::ThreadChecker aborts on a check from a thread other than its owner
// where LUMEN_THREAD_CHECKS is 1 (Debug, and the sanitizer build, which
// defines it for every target), and compiles to nothing elsewhere. The wrong
// thread's check runs in a forked child, whose end the test reads.
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <thread>

#include "lumen/common/thread_checker.h"

#include <catch2/catch.hpp>

namespace {

// Forks; the child binds a checker to its main thread, checks it from a
// second thread and exits 0 if that returned. The child's wait status.
int CheckFromAnotherThreadInChild() {
  pid_t pid = ::fork();
  if (pid == 0) {
    lumen::ThreadChecker checker;
    checker.Check("the test's state");
    std::thread other([&] { checker.Check("the test's state"); });
    other.join();
    ::_exit(0);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return status;
}

}  // namespace

TEST_CASE("ThreadChecker: the owner's checks pass, after Detach another thread's too",
          "[thread_checker]") {
  lumen::ThreadChecker checker;
  checker.Check("state");
  checker.Check("state");
  checker.Detach();
  std::thread other([&] { checker.Check("state"); });  // binds it anew
  other.join();
}

TEST_CASE("ThreadChecker: a check from another thread aborts where checks are on",
          "[thread_checker]") {
  const int status = CheckFromAnotherThreadInChild();
#if LUMEN_THREAD_CHECKS
  REQUIRE(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGABRT);
#else
  // Compiled out (RelWithDebInfo, Release without LUMEN_THREAD_CHECKS).
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
#endif
}
