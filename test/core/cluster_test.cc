// The command line: `lumen start --head`, a driver joining it, `lumen status`,
// `lumen stop`; and the quickstart example as a new user runs it.
#include <catch2/catch.hpp>
#include <filesystem>
#include <string>

#include "lumen/lumen.h"
#include "test/core/test_support.h"

namespace {
int Triple(int x) { return 3 * x; }
}  // namespace

LUMEN_REMOTE(Triple);

using lumen::test::RunCommand;
using lumen::test::WaitUntil;

TEST_CASE("lumen start --head a driver joins lumen status shows it lumen stop cleans up") {
  std::string out;
  auto sessions_before = lumen::test::SessionDirs();
  REQUIRE(RunCommand(std::string(LUMEN_CLI_PATH) + " start --head --num-cpus 2 "
                         "--object-store-memory 268435456 --resources '{\"ssd\": 1}'",
                     &out) == 0);
  INFO(out);
  REQUIRE(out.find("Started a Lumen head at 127.0.0.1:") != std::string::npos);
  auto sessions = lumen::test::SessionDirs();
  REQUIRE(sessions.size() == sessions_before.size() + 1);
  std::string session;
  for (const auto& s : sessions)
    if (!sessions_before.contains(s)) session = s;

  {
    lumen::Config config;
    config.address = "auto";
    lumen::Init(config);
    REQUIRE(*lumen::Get(lumen::Task(Triple).Remote(14)) == 42);
    REQUIRE(RunCommand(std::string(LUMEN_CLI_PATH) + " status", &out) == 0);
    INFO(out);
    REQUIRE(out.find("alive") != std::string::npos);
    REQUIRE(out.find("CPU") != std::string::npos);
    REQUIRE(out.find("ssd") != std::string::npos);
    REQUIRE(out.find("object store") != std::string::npos);
    REQUIRE(out.find("workers:") != std::string::npos);
    REQUIRE(RunCommand(std::string(LUMEN_CLI_PATH) + " list nodes", &out) == 0);
    REQUIRE(out.find("ALIVE") != std::string::npos);
    lumen::Shutdown();
  }
  // The cluster outlives the driver.
  REQUIRE(std::filesystem::exists(session));
  REQUIRE(!lumen::test::ProcessesMentioning(session).empty());

  REQUIRE(RunCommand(std::string(LUMEN_CLI_PATH) + " stop", &out) == 0);
  INFO(out);
  REQUIRE(out.find("Stopped") != std::string::npos);
  REQUIRE_FALSE(std::filesystem::exists(session));
  REQUIRE(WaitUntil([&] { return lumen::test::ProcessesMentioning(session).empty(); }));
}

TEST_CASE("a driver given a bad address gets a clear error") {
  lumen::Config config;
  config.address = "127.0.0.1:1";
  try {
    lumen::Init(config);
    lumen::Shutdown();
    FAIL("Init should throw");
  } catch (const lumen::Error& e) {
    REQUIRE(std::string(e.what()).find("127.0.0.1:1") != std::string::npos);
  }
}

TEST_CASE("the quickstart example runs on an embedded cluster") {
  std::string out;
  REQUIRE(RunCommand(LUMEN_QUICKSTART_PATH, &out) == 0);
  INFO(out);
  REQUIRE(out.find("Plus(1, 2) = 3") != std::string::npos);
  REQUIRE(out.find("Fibonacci(10) = 55") != std::string::npos);
  REQUIRE(out.find("done") != std::string::npos);
}

namespace {
std::string NodeOfTask() { return lumen::GetNodeId(); }
double CpusSeenByTask() { return lumen::ClusterResources()["CPU"]; }
}  // namespace

LUMEN_REMOTE(NodeOfTask, CpusSeenByTask);

TEST_CASE("ClusterResources AvailableResources Nodes and GetNodeId describe the cluster") {
  lumen::Config config = lumen::test::ScopedCluster::DefaultConfig();
  config.num_cpus = 3;
  config.resources = {{"ssd", 2}};
  lumen::test::ScopedCluster cluster(config);
  auto total = lumen::ClusterResources();
  REQUIRE(total["CPU"] == 3);
  REQUIRE(total["ssd"] == 2);
  REQUIRE(total["object_store_memory"] == static_cast<double>(512ull << 20));
  auto nodes = lumen::Nodes();
  REQUIRE(nodes.size() == 1);
  REQUIRE(nodes[0].alive);
  REQUIRE(nodes[0].id == lumen::GetNodeId());
  REQUIRE(*lumen::Get(lumen::Task(NodeOfTask).Remote()) == nodes[0].id);
  REQUIRE(*lumen::Get(lumen::Task(CpusSeenByTask).Remote()) == 3);
  REQUIRE(lumen::AvailableResources()["CPU"] <= 3);
  lumen::Shutdown();
  REQUIRE_THROWS_AS(lumen::Nodes(), lumen::Error);
  lumen::Init(config);  // for the ScopedCluster's own Shutdown
}
