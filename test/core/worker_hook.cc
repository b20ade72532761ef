// Workers and daemons of the test clusters re-execute this test binary. Catch2's
// prebuilt main runs first, so a listener hands such processes to lumen::Init
// (which never returns for them) before any test case starts.
#include <cstdlib>
#include <string_view>

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
};

}  // namespace

CATCH_REGISTER_LISTENER(LumenRoleListener)
