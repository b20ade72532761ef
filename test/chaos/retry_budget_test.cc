// Issue 14, matrix item 2: the retry budget. Attempts are counted through a
// side channel the test reads (each attempt appends its pid to a file), so a
// hidden extra attempt shows.
#include <signal.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>

#include "lumen/lumen.h"
#include "test/chaos/chaos_support.h"
#include "test/core/test_support.h"

namespace {

using lumen::test::chaos::AppendLine;
using lumen::test::chaos::ReadLines;

// Records the attempt (its pid, one line in `log`), then waits to be killed.
int RecordAndHang(std::string log) {
  AppendLine(log, std::to_string(::getpid()));
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return -1;
}

// Records the attempt, then throws until attempt `succeed_at` (1-based).
int ThrowUntil(std::string log, int succeed_at) {
  AppendLine(log, std::to_string(::getpid()));
  int attempt = static_cast<int>(ReadLines(log).size());
  if (attempt < succeed_at) throw std::runtime_error("attempt " + std::to_string(attempt) + " failed");
  return attempt;
}

// Records the attempt, runs `millis`, records its end.
int RecordAndRun(std::string log, int millis) {
  AppendLine(log, "start " + std::to_string(::getpid()));
  std::this_thread::sleep_for(std::chrono::milliseconds(millis));
  AppendLine(log, "end");
  return 7;
}

int Twice(int x) { return 2 * x; }
int Sum(int a, int b) { return a + b; }

}  // namespace

LUMEN_REMOTE(RecordAndHang, ThrowUntil, RecordAndRun, Twice, Sum);

using lumen::test::ScopedCluster;
using lumen::test::WaitUntil;
using lumen::test::chaos::LeakCheck;
using lumen::test::chaos::ProcessGone;
using lumen::test::chaos::ScratchDir;

TEST_CASE("a task killed at every attempt runs exactly max_retries + 1 times, then fails") {
  // Invariant: with max_retries = n and its worker SIGKILLed at every attempt,
  // the task runs exactly n + 1 times and Get throws WorkerCrashedError; no
  // attempt follows the failure. n = 2 and n = 0.
  LeakCheck leaks;
  ScratchDir scratch("lumen-chaos");
  std::string session;
  {
    ScopedCluster cluster;
    session = cluster.session_dir();
    for (int max_retries : {2, 0}) {
      INFO("max_retries " << max_retries);
      std::string log = scratch.path() + "/attempts-" + std::to_string(max_retries);
      auto ref = lumen::Task(RecordAndHang).SetMaxRetries(max_retries).Remote(log);
      for (int attempt = 1; attempt <= max_retries + 1; ++attempt) {
        INFO("attempt " << attempt);
        REQUIRE(WaitUntil([&] { return static_cast<int>(ReadLines(log).size()) >= attempt; }));
        auto lines = ReadLines(log);
        REQUIRE(static_cast<int>(lines.size()) == attempt);
        pid_t pid = std::stoi(lines.back());
        REQUIRE(::kill(pid, SIGKILL) == 0);
      }
      REQUIRE_THROWS_AS(lumen::Get(ref, std::chrono::seconds(30)), lumen::WorkerCrashedError);
      // Nothing runs it again: a later task runs, and the count stays.
      REQUIRE(*lumen::Get(lumen::Task(Sum).Remote(1, 2), std::chrono::seconds(30)) == 3);
      CHECK(static_cast<int>(ReadLines(log).size()) == max_retries + 1);
    }
  }
  CHECK(leaks.Leaks(session) == "");
}

TEST_CASE("a task that throws is not retried unless asked, and its error reaches dependents") {
  // Invariant: an exception is the task's result (1 attempt, TaskError on
  // Get and on every dependent's Get) even with retries left; with
  // SetRetryExceptions(true) it runs again within max_retries: success on a
  // later attempt is the result, and a spent budget gives the last error.
  LeakCheck leaks;
  ScratchDir scratch("lumen-chaos");
  std::string session;
  {
    ScopedCluster cluster;
    session = cluster.session_dir();
    std::string once = scratch.path() + "/once";
    auto failed = lumen::Task(ThrowUntil).SetMaxRetries(3).Remote(once, 99);
    REQUIRE_THROWS_AS(lumen::Get(failed, std::chrono::seconds(30)), lumen::TaskError);
    auto dependent = lumen::Task(Twice).Remote(failed);
    try {
      lumen::Get(dependent, std::chrono::seconds(30));
      FAIL("the dependent should fail with its argument's error");
    } catch (const lumen::TaskError& e) {
      CHECK(e.task_message() == "attempt 1 failed");
      CHECK(e.exception_type() == "std::runtime_error");
    }
    CHECK(ReadLines(once).size() == 1);

    std::string retried = scratch.path() + "/retried";
    auto third = lumen::Task(ThrowUntil).SetMaxRetries(3).SetRetryExceptions(true).Remote(retried, 3);
    CHECK(*lumen::Get(third, std::chrono::seconds(30)) == 3);
    CHECK(ReadLines(retried).size() == 3);

    std::string spent = scratch.path() + "/spent";
    auto never = lumen::Task(ThrowUntil).SetMaxRetries(2).SetRetryExceptions(true).Remote(spent, 99);
    try {
      lumen::Get(never, std::chrono::seconds(30));
      FAIL("should throw after 3 attempts");
    } catch (const lumen::TaskError& e) {
      CHECK(e.task_message() == "attempt 3 failed");
    }
    CHECK(ReadLines(spent).size() == 3);
  }
  CHECK(leaks.Leaks(session) == "");
}

TEST_CASE("a cancelled task fails with TaskCancelledError and is never retried") {
  // Invariant: lumen::Cancel makes Get throw TaskCancelledError at once, with
  // retries left (max_retries=-1): a queued task never runs; a running one
  // with force has its worker killed and does not run again; a running one
  // without force runs to its end once and its result is dropped.
  LeakCheck leaks;
  ScratchDir scratch("lumen-chaos");
  std::string session;
  {
    ScopedCluster cluster;  // 2 CPUs
    session = cluster.session_dir();

    SECTION("queued: removed, never runs") {
      std::string blocker_log = scratch.path() + "/blocker";
      auto blocker = lumen::Task(RecordAndHang).SetNumCpus(2).SetMaxRetries(0).Remote(blocker_log);
      REQUIRE(WaitUntil([&] { return ReadLines(blocker_log).size() == 1; }));
      std::string queued_log = scratch.path() + "/queued";
      auto queued = lumen::Task(RecordAndHang).SetMaxRetries(-1).Remote(queued_log);
      lumen::Cancel(queued);
      auto start = std::chrono::steady_clock::now();
      REQUIRE_THROWS_AS(lumen::Get(queued, std::chrono::seconds(10)), lumen::TaskCancelledError);
      CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
      // Free the CPUs: the cancelled task still does not run.
      REQUIRE(::kill(std::stoi(ReadLines(blocker_log).front()), SIGKILL) == 0);
      REQUIRE_THROWS_AS(lumen::Get(blocker, std::chrono::seconds(30)), lumen::WorkerCrashedError);
      REQUIRE(*lumen::Get(lumen::Task(Sum).Remote(2, 3), std::chrono::seconds(30)) == 5);
      CHECK(ReadLines(queued_log).empty());
      // Cancelling again, or a finished task, changes nothing.
      lumen::Cancel(queued);
      auto done = lumen::Task(Sum).Remote(1, 1);
      REQUIRE(*lumen::Get(done, std::chrono::seconds(30)) == 2);
      lumen::Cancel(done, true);
      CHECK(*lumen::Get(done) == 2);
    }
    SECTION("running, force=true: its worker is killed, no retry") {
      std::string log = scratch.path() + "/forced";
      auto ref = lumen::Task(RecordAndHang).SetMaxRetries(-1).Remote(log);
      REQUIRE(WaitUntil([&] { return ReadLines(log).size() == 1; }));
      pid_t worker = std::stoi(ReadLines(log).front());
      lumen::Cancel(ref, /*force=*/true);
      try {
        lumen::Get(ref, std::chrono::seconds(10));
        FAIL("Get should throw TaskCancelledError");
      } catch (const lumen::TaskCancelledError& e) {
        CHECK_THAT(e.what(), Catch::Contains("force=true"));
      }
      REQUIRE(WaitUntil([&] { return ProcessGone(worker); }, std::chrono::seconds(5)));
      REQUIRE(*lumen::Get(lumen::Task(Sum).Remote(2, 3), std::chrono::seconds(30)) == 5);
      CHECK(ReadLines(log).size() == 1);
    }
    SECTION("running, force=false: it runs to its end once, its result is dropped") {
      std::string log = scratch.path() + "/soft";
      auto ref = lumen::Task(RecordAndRun).SetMaxRetries(-1).Remote(log, 1500);
      REQUIRE(WaitUntil([&] { return ReadLines(log).size() == 1; }));
      pid_t worker = std::stoi(ReadLines(log).front().substr(6));
      lumen::Cancel(ref);
      REQUIRE_THROWS_AS(lumen::Get(ref, std::chrono::seconds(10)), lumen::TaskCancelledError);
      // Thrown before the task ended.
      CHECK(ReadLines(log).size() == 1);
      REQUIRE(WaitUntil([&] { return ReadLines(log).size() == 2; }, std::chrono::seconds(10)));
      CHECK(ReadLines(log).back() == "end");
      CHECK_FALSE(ProcessGone(worker));  // not killed
      REQUIRE(*lumen::Get(lumen::Task(Sum).Remote(2, 3), std::chrono::seconds(30)) == 5);
      CHECK(ReadLines(log).size() == 2);
    }
  }
  CHECK(leaks.Leaks(session) == "");
}
