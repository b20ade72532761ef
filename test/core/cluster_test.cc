// The command line: `lumen start --head`, a driver joining it, `lumen status`,
// `lumen stop`; and the quickstart example as a new user runs it.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "lumen/common/head_client.h"
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
  lumen::test::StopClustersAtExit guard(LUMEN_CLI_PATH);
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

namespace {
// Waits until `parties` tasks arrived (files in `dir`), then says where it ran.
std::string GatherAt(std::string dir, int parties) {
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/" + std::to_string(::getpid())).flush();
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    int n = 0;
    for (const auto& entry : std::filesystem::directory_iterator(dir)) n += entry.exists() ? 1 : 0;
    if (n >= parties) return lumen::GetNodeId();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // polling files: no event
  }
  throw std::runtime_error("the tasks did not run at the same time");
}
}  // namespace
LUMEN_REMOTE(GatherAt);

TEST_CASE("lumen start --address twice on one machine makes a 3-node cluster that lumen stop stops") {
  std::string out;
  std::string cli = LUMEN_CLI_PATH;
  lumen::test::StopClustersAtExit guard(cli);
  auto sessions_before = lumen::test::SessionDirs();
  REQUIRE(RunCommand(cli + " start --head --num-cpus 1 --object-store-memory 134217728", &out) == 0);
  for (int i = 0; i < 2; ++i) {
    REQUIRE(RunCommand(cli + " start --address auto --num-cpus 1 --object-store-memory 134217728",
                       &out) == 0);
    INFO(out);
    REQUIRE(out.find("Started a Lumen node joined to 127.0.0.1:") != std::string::npos);
  }
  auto sessions = lumen::test::SessionDirs();
  REQUIRE(sessions.size() == sessions_before.size() + 3);  // its own directory per node
  REQUIRE(RunCommand(cli + " list nodes", &out) == 0);
  INFO(out);
  size_t alive = 0;
  for (size_t at = out.find("ALIVE"); at != std::string::npos; at = out.find("ALIVE", at + 1)) ++alive;
  REQUIRE(alive == 3);
  {
    lumen::Config config;
    config.address = "auto";
    lumen::Init(config);
    // Three tasks that must run at once on three 1-CPU nodes.
    std::string dir = *sessions.begin() + "-gather";
    std::vector<lumen::ObjectRef<std::string>> refs;
    for (int i = 0; i < 3; ++i) {
      refs.push_back(lumen::Task(GatherAt).SetSchedulingStrategy(lumen::Spread()).Remote(dir, 3));
    }
    std::set<std::string> nodes;
    for (const auto& node : lumen::Get(refs)) nodes.insert(*node);
    std::filesystem::remove_all(dir);
    REQUIRE(nodes.size() == 3);
    lumen::Shutdown();
  }
  REQUIRE(RunCommand(cli + " stop", &out) == 0);
  INFO(out);
  REQUIRE(out.find("Stopped 4 Lumen processes") != std::string::npos);
  for (const auto& s : lumen::test::SessionDirs()) REQUIRE(sessions_before.contains(s));
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

TEST_CASE("a head that cannot start stops the node started beside it and leaves nothing behind") {
  // Invariant: the node daemon starts while its head is still starting (it
  // waits for the head's address on a pipe); when the head fails, the start
  // fails naming the head's error, and neither daemon nor the session
  // directory is left behind. Each process of this start carries a marker
  // in its environment, so that a survivor is found by it.
  std::string out;
  lumen::test::StopClustersAtExit guard(LUMEN_CLI_PATH);
  auto sessions_before = lumen::test::SessionDirs();
  int busy = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(busy >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(busy, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  REQUIRE(::listen(busy, 1) == 0);
  socklen_t len = sizeof(addr);
  REQUIRE(::getsockname(busy, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  const std::string marker = "LUMEN_TEST_HEAD_FAILS=" + std::to_string(::getpid()) + "-" +
                             std::to_string(ntohs(addr.sin_port));
  int status = RunCommand(marker + " " + LUMEN_CLI_PATH + " start --head --port " +
                              std::to_string(ntohs(addr.sin_port)),
                          &out);
  ::close(busy);
  INFO(out);
  CHECK(status != 0);
  CHECK(out.find("head daemon failed to start") != std::string::npos);
  // No process of that start is left (the CLI waited for both daemons).
  std::vector<std::string> survivors;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    std::ifstream environ(entry.path() / "environ", std::ios::binary);
    std::string env((std::istreambuf_iterator<char>(environ)), std::istreambuf_iterator<char>());
    if (env.find(marker) != std::string::npos) survivors.push_back(entry.path().filename());
  }
  CHECK(survivors.empty());
  for (const auto& s : lumen::test::SessionDirs()) CHECK(sessions_before.contains(s));
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

TEST_CASE("a head beyond loopback refuses connections without its token") {
  // Invariant: every connection to such a head presents the token; one without
  // it is refused and the head keeps serving the others.
  std::string out;
  lumen::test::StopClustersAtExit guard(LUMEN_CLI_PATH);
  REQUIRE(RunCommand(std::string(LUMEN_CLI_PATH) +
                         " start --head --host 0.0.0.0 --num-cpus 1 --object-store-memory 67108864",
                     &out) == 0);
  INFO(out);
  auto at = out.find("head at 0.0.0.0:");
  REQUIRE(at != std::string::npos);
  std::string port = out.substr(at + 16, out.find(' ', at + 16) - (at + 16));
  std::string address = "127.0.0.1:" + port;
  auto file = out.find("kept in ");
  REQUIRE(file != std::string::npos);
  std::string token_file = out.substr(file + 8, out.find(' ', file + 8) - (file + 8));
  REQUIRE((std::filesystem::status(token_file).permissions() & std::filesystem::perms::all) ==
          (std::filesystem::perms::owner_read | std::filesystem::perms::owner_write));
  std::string token;
  std::getline(std::ifstream(token_file), token);
  REQUIRE(token.size() >= 32);

  std::string cli = std::string(LUMEN_CLI_PATH);
  REQUIRE(RunCommand("LUMEN_TOKEN= " + cli + " status --address " + address, &out) != 0);
  REQUIRE(out.find("token") != std::string::npos);
  REQUIRE(RunCommand(cli + " status --address " + address + " --token wrong-token", &out) != 0);
  // A second node joins with the token.
  REQUIRE(RunCommand(cli + " start --address " + address + " --token " + token +
                         " --num-cpus 1 --object-store-memory 67108864",
                     &out) == 0);
  REQUIRE(RunCommand(cli + " status --address " + address + " --token " + token, &out) == 0);
  REQUIRE(out.find("2 nodes") != std::string::npos);
  // That node daemons beyond loopback refuse a wrong token needs an address
  // off loopback: network_test.node-token checks it (SKIPPED without one).
  REQUIRE(RunCommand(cli + " stop", &out) == 0);
}
