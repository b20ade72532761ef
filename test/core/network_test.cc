// Clusters beyond loopback, which not every machine can make. Its own main
// runs one case, named by the first argument, and exits 77 (SKIPPED in CTest's
// count) when the machine cannot run it:
//
//   network_test node-token   needs a non-loopback IPv4 address on this host
//   network_test netns        needs root and `ip netns` (a veth pair)
//
// Workers re-execute this binary: main hands them to lumen::Init first.
#define CATCH_CONFIG_RUNNER
#include <ifaddrs.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <arpa/inet.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "lumen/common/address.h"
#include "lumen/common/head_client.h"
#include "lumen/lumen.h"
#include "test/core/netns.h"
#include "test/core/test_support.h"

namespace {

using lumen::test::RunCommand;

std::string NodeOfTask() { return lumen::GetNodeId(); }
std::vector<uint8_t> Filled(uint64_t size) { return std::vector<uint8_t>(size, 0x5a); }

// An IPv4 address of an interface that is up and not loopback; "" if none.
std::string NonLoopbackAddress() {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return "";
  std::string found;
  for (ifaddrs* a = list; a != nullptr && found.empty(); a = a->ifa_next) {
    if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET) continue;
    char text[INET_ADDRSTRLEN] = {0};
    auto* in = reinterpret_cast<sockaddr_in*>(a->ifa_addr);
    if (::inet_ntop(AF_INET, &in->sin_addr, text, sizeof(text)) == nullptr) continue;
    if (!lumen::IsLoopbackHost(text)) found = text;
  }
  ::freeifaddrs(list);
  return found;
}

// The text after `marker` in `out`, up to the next space.
std::string After(const std::string& out, const std::string& marker) {
  auto at = out.find(marker);
  if (at == std::string::npos) return "";
  at += marker.size();
  return out.substr(at, out.find_first_of(" \n", at) - at);
}

}  // namespace

LUMEN_REMOTE(NodeOfTask, Filled);

TEST_CASE("node-token: node daemons beyond loopback refuse a wrong token; --node-ip-address") {
  // Invariant: a head and nodes listening on a non-loopback address demand the
  // cluster's token on every connection, the nodes' included; a node given
  // --node-ip-address listens and advertises there.
  std::string ip = NonLoopbackAddress();
  REQUIRE(!ip.empty());
  std::string out;
  std::string cli = LUMEN_CLI_PATH;
  lumen::test::StopClustersAtExit guard(cli);
  REQUIRE(RunCommand(cli + " start --head --host " + ip +
                         " --num-cpus 1 --object-store-memory 67108864",
                     &out) == 0);
  INFO(out);
  std::string address = After(out, "head at ");
  REQUIRE(address.rfind(ip + ":", 0) == 0);
  std::string token;
  std::getline(std::ifstream(After(out, "kept in ")), token);
  REQUIRE(token.size() >= 32);
  REQUIRE(RunCommand(cli + " start --address " + address + " --token " + token +
                         " --node-ip-address " + ip + " --num-cpus 1 --object-store-memory 67108864",
                     &out) == 0);
  lumen::runtime::SetHeadToken(token);
  auto nodes = lumen::runtime::QueryNodes(address);
  REQUIRE(nodes.ok());
  REQUIRE(nodes->size() == 2);
  for (const auto& node : *nodes) {
    std::string tcp = lumen::ParseAddress(node.address).tcp;
    INFO(node.address);
    REQUIRE(tcp.rfind(ip + ":", 0) == 0);
    lumen::runtime::SetHeadToken("wrong-token");
    REQUIRE_FALSE(lumen::runtime::QueryNodeStats(tcp).ok());
    lumen::runtime::SetHeadToken(token);
    REQUIRE(lumen::runtime::QueryNodeStats(tcp).ok());
  }
  lumen::runtime::SetHeadToken("");
  REQUIRE(RunCommand(cli + " stop", &out) == 0);
}

TEST_CASE("netns: a node in another network namespace joins over TCP with the token and runs work") {
  // The other node's namespace: 10.77.0.2 there, 10.77.0.1 (the bridge) here.
  lumen::test::BridgedNamespaces netns(1, "10.77.0");
  INFO(netns.error());
  REQUIRE(netns.ok());
  std::string out;
  std::string cli = LUMEN_CLI_PATH;
  lumen::test::StopClustersAtExit guard(cli);
  REQUIRE(RunCommand(cli + " start --head --host 10.77.0.1 --num-cpus 1 "
                           "--object-store-memory 134217728",
                     &out) == 0);
  INFO(out);
  std::string address = After(out, "head at ");
  REQUIRE(address.rfind("10.77.0.1:", 0) == 0);
  std::string token;
  std::getline(std::ifstream(After(out, "kept in ")), token);
  // The other node: its own network stack, reachable only through the veth.
  REQUIRE(RunCommand(netns.Exec(0, cli + " start --address " + address + " --token " + token +
                                " --num-cpus 2 --object-store-memory 134217728 "
                                "--resources '{\"far\": 1}'"),
                     &out) == 0);
  REQUIRE(out.find("listening on 10.77.0.2") != std::string::npos);
  {
    lumen::Config config;
    config.address = address;
    config.token = token;
    lumen::Init(config);
    std::string far, far_tcp;
    for (const auto& node : lumen::Nodes()) {
      if (node.address.rfind("10.77.0.2:", 0) == 0) {
        far = node.id;
        far_tcp = lumen::ParseAddress(node.address).tcp;
      }
    }
    REQUIRE(!far.empty());
    // The far node refuses a connection with the wrong token.
    lumen::runtime::SetHeadToken("wrong-token");
    REQUIRE_FALSE(lumen::runtime::QueryNodeStats(far_tcp).ok());
    lumen::runtime::SetHeadToken(token);
    REQUIRE(lumen::runtime::QueryNodeStats(far_tcp).ok());
    REQUIRE(*lumen::Get(lumen::Task(NodeOfTask).SetResource("far", 1).Remote()) == far);
    // An object made there is pulled here over the veth, intact.
    auto blob = lumen::Task(Filled).SetResource("far", 1).Remote(uint64_t{8} << 20);
    auto bytes = lumen::GetArray(blob);
    REQUIRE(bytes.size() == (8u << 20));
    REQUIRE(std::all_of(bytes.begin(), bytes.end(), [](uint8_t b) { return b == 0x5a; }));
    lumen::Shutdown();
  }
  lumen::runtime::SetHeadToken("");
  REQUIRE(RunCommand(cli + " stop", &out) == 0);
}

int main(int argc, char** argv) {
  if (const char* role = std::getenv("LUMEN_ROLE"); role && *role) lumen::Init(argc, argv);
  std::string which = argc > 1 ? argv[1] : "";
  if (which == "node-token") {
    if (NonLoopbackAddress().empty()) {
      std::printf("SKIPPED: this host has no non-loopback IPv4 address to listen on\n");
      return 77;
    }
  } else if (which == "netns") {
    if (!lumen::test::BridgedNamespaces(1, "10.77.0").ok()) {
      std::printf("SKIPPED: network namespaces are not available here (needs root and ip netns)\n");
      return 77;
    }
  } else {
    std::fprintf(stderr, "usage: %s node-token|netns\n", argv[0]);
    return 2;
  }
  // This run's own TMPDIR: session directories and `lumen stop` see only its
  // clusters, also when other tests run at the same time.
  const char* tmp = std::getenv("TMPDIR");
  std::string dir = std::string(tmp && *tmp ? tmp : "/tmp") + "/lumen-t-XXXXXX";
  if (::mkdtemp(dir.data()) == nullptr) return 1;
  ::setenv("TMPDIR", dir.c_str(), 1);
  std::string filter = which + ":*";
  std::vector<char*> args{argv[0], filter.data()};
  int failed = Catch::Session().run(static_cast<int>(args.size()), args.data());
  std::error_code ec;
  if (!std::filesystem::remove(dir, ec)) std::fprintf(stderr, "left behind: %s\n", dir.c_str());
  return failed == 0 ? 0 : 1;
}
