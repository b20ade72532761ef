// Workers and daemons of the test clusters re-execute this test binary. Catch2's
// prebuilt main runs first, so a listener hands such processes to lumen::Init
// (which never returns for them) before any test case starts.
#include <cstdlib>

#define CATCH_CONFIG_EXTERNAL_INTERFACES
#include <catch2/catch.hpp>

#include "lumen/lumen.h"

namespace {

struct LumenRoleListener : Catch::TestEventListenerBase {
  using TestEventListenerBase::TestEventListenerBase;
  void testRunStarting(const Catch::TestRunInfo& info) override {
    const char* role = std::getenv("LUMEN_ROLE");
    if (role != nullptr && *role != '\0') lumen::Init(0, nullptr);
    TestEventListenerBase::testRunStarting(info);
  }
};

}  // namespace

CATCH_REGISTER_LISTENER(LumenRoleListener)
