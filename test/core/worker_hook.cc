// Workers and daemons of the test clusters re-execute this test binary. Catch2's
// prebuilt main runs first, so a listener hands such processes to lumen::Init
// (which never returns for them) before any test case starts.
//
// In the driver (the test process itself) the same listener gives each test
// case its own TMPDIR, a fresh directory under the original one: session
// directories, `lumen stop` and `--address auto` (which look there) then see
// only this test case's clusters, so test cases can run in parallel
// (LUMEN_TEST_JOBS > 1). The directory is removed when the test case ends if
// it is empty; one that is not (a cluster left something behind) stays, so
// that scripts/test reports it.
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <string>
#include <string_view>
#include <thread>

#define CATCH_CONFIG_EXTERNAL_INTERFACES
#include <catch2/catch.hpp>

#include "lumen/lumen.h"
#include "lumen/node/node_daemon.h"

namespace {

struct LumenRoleListener : Catch::TestEventListenerBase {
  using TestEventListenerBase::TestEventListenerBase;
  void testRunStarting(const Catch::TestRunInfo& info) override {
    const char* role = std::getenv("LUMEN_ROLE");
    // Test hook: a node daemon of a test cluster refuses its first N bundle
    // prepares (placement-group rollback tests).
    const char* refuse = std::getenv("LUMEN_TESTING_REFUSE_PREPARES");
    if (refuse != nullptr && role != nullptr && std::string_view(role) == "node") {
      lumen::node::TEST_SetNodeDaemonTesting({.refuse_prepares = std::atoi(refuse)});
    }
    if (role != nullptr && *role != '\0') lumen::Init(0, nullptr);
    TestEventListenerBase::testRunStarting(info);
  }

  void testCaseStarting(const Catch::TestCaseInfo& info) override {
    // A driver that a test case started (this binary re-run on one test case)
    // shares its parent's TMPDIR: the parent's clusters are found there.
    if (std::getenv("LUMEN_TEST_TMPDIR") != nullptr) {
      TestEventListenerBase::testCaseStarting(info);
      return;
    }
    const char* tmp = std::getenv("TMPDIR");
    original_tmpdir_ = tmp != nullptr ? tmp : "";
    std::string root = original_tmpdir_.empty() ? "/tmp" : original_tmpdir_;
    while (root.size() > 1 && root.back() == '/') root.pop_back();
    // Short: Unix socket paths under it must stay within 108 bytes.
    std::string pattern = root + "/lumen-t-XXXXXX";
    if (::mkdtemp(pattern.data()) != nullptr) {
      test_tmpdir_ = pattern;
      ::setenv("TMPDIR", test_tmpdir_.c_str(), 1);
      ::setenv("LUMEN_TEST_TMPDIR", test_tmpdir_.c_str(), 1);
    }
    TestEventListenerBase::testCaseStarting(info);
  }

  void testCaseEnded(const Catch::TestCaseStats& stats) override {
    if (!test_tmpdir_.empty()) {
      // Processes that outlive the test case (a failed one) may still be
      // removing their session directories: give them a moment.
      std::error_code ec;
      auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
      while (!std::filesystem::is_empty(test_tmpdir_, ec) && !ec &&
             std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      if (!std::filesystem::remove(test_tmpdir_, ec)) {
        std::cerr << "test left files behind in its TMPDIR " << test_tmpdir_ << std::endl;
      }
      ::unsetenv("LUMEN_TEST_TMPDIR");
      if (original_tmpdir_.empty()) {
        ::unsetenv("TMPDIR");
      } else {
        ::setenv("TMPDIR", original_tmpdir_.c_str(), 1);
      }
      test_tmpdir_.clear();
    }
    TestEventListenerBase::testCaseEnded(stats);
  }

 private:
  std::string original_tmpdir_;
  std::string test_tmpdir_;
};

}  // namespace

CATCH_REGISTER_LISTENER(LumenRoleListener)
