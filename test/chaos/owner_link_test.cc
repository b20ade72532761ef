// Reliability item 4 with item 8's link faults (doc/reliability.md): a
// remote owner's link to a node resets while the owner lives. The node it
// reaches goes through a FaultProxy (the node advertises the proxy's address,
// LUMEN_NODE_ADVERTISE_ADDRESS, and listens on a fixed port behind it,
// LUMEN_NODE_PORT), so every connection of other nodes' processes to that
// daemon is proxied and ResetAll() cuts them.
#include <signal.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include <boost/asio.hpp>

#include "lumen/common/head_client.h"
#include "lumen/lumen.h"
#include "test/chaos/fault_proxy.h"
#include "test/core/test_support.h"

namespace {

using lumen::test::MultiNodeCluster;
using lumen::test::WaitUntil;
using lumen::test::chaos::FaultProxy;

// 1 MiB (stored in its node's store, never inline), filled from `seed`.
std::vector<uint8_t> Bytes(int seed) {
  std::vector<uint8_t> v(1 << 20);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<uint8_t>((i * 7 + seed) & 0xff);
  return v;
}

// An owner of a task result made on another node: it submits the task, so
// it owns the result, and its link to that node's daemon carries the lease.
class RemoteLender {
 public:
  static RemoteLender* Create() { return new RemoteLender(); }
  int Pid() { return static_cast<int>(::getpid()); }
  lumen::ObjectRef<std::vector<uint8_t>> LendFrom(std::string node, int seed) {
    return lumen::Task(Bytes).SetSchedulingStrategy(lumen::NodeAffinity(node, false)).Remote(seed);
  }
};

LUMEN_REMOTE(Bytes, RemoteLender::Create, &RemoteLender::Pid, &RemoteLender::LendFrom);

// A TCP port free now on loopback (for a node to listen on behind the proxy).
int FreePort() {
  boost::asio::io_context io;
  boost::asio::ip::tcp::acceptor acceptor(
      io, boost::asio::ip::tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"), 0));
  return acceptor.local_endpoint().port();
}

}  // namespace

TEST_CASE("a remote owner's link reset keeps its objects on that node, and its death frees them "
          "within 2 s") {
  // Invariant (reliability item 4): a node frees the primary copies a
  // remote owner (a process of another node) owns there only once that
  // owner is dead, not when its connection closes: after a reset of that
  // link (FaultProxy::ResetAll) the copy stays for 3 s and is read back
  // intact; after the owner's SIGKILL it leaves the store within 2 s.
  const int port = FreePort();
  FaultProxy proxy({.target = "127.0.0.1:" + std::to_string(port),
                    .max_delay = std::chrono::milliseconds(0),
                    .reset_probability = 0,
                    .split_writes = false});
  MultiNodeCluster::NodeSpec behind_proxy{{{"CPU", 2}}};
  behind_proxy.env = {{"LUMEN_NODE_PORT", std::to_string(port)},
                      {"LUMEN_NODE_ADVERTISE_ADDRESS", proxy.address()}};
  MultiNodeCluster cluster({{{{"CPU", 2}}}, behind_proxy},
                           {{"LUMEN_OWNER_PROBE_PERIOD_MS", "200"}});
  auto used = [&]() -> int64_t {
    auto stats = lumen::runtime::QueryNodeStats(cluster.node_address(1));
    return stats.ok() ? static_cast<int64_t>(stats->store_used) : -1;
  };
  auto lender = lumen::Actor(RemoteLender::Create)
                    .SetSchedulingStrategy(lumen::NodeAffinity(cluster.node_id(0), false))
                    .Remote();
  const int pid = *lumen::Get(lender.Task(&RemoteLender::Pid).Remote(), std::chrono::seconds(30));
  const int64_t base = used();
  REQUIRE(base >= 0);
  auto there = *lumen::Get(lender.Task(&RemoteLender::LendFrom).Remote(cluster.node_id(1), 3),
                           std::chrono::seconds(30));
  REQUIRE(lumen::Wait(std::vector{there}, 1, std::chrono::seconds(30)).ready.size() == 1);
  REQUIRE(WaitUntil([&] { return used() >= base + (1 << 20); }));
  const uint64_t connections = proxy.connections();
  REQUIRE(connections >= 1);  // the lender's link (and our stats queries) went through it

  proxy.ResetAll();
  REQUIRE(proxy.resets() >= 1);
  // The node noticed the close at once; past several probe periods the copy
  // is still there.
  CHECK_FALSE(WaitUntil([&] { return used() < base + (1 << 20); }, std::chrono::seconds(3)));
  REQUIRE(*lumen::Get(there, std::chrono::seconds(30)) == Bytes(3));

  REQUIRE(::kill(pid, SIGKILL) == 0);
  const auto killed = std::chrono::steady_clock::now();
  REQUIRE(WaitUntil([&] { return used() == base; }, std::chrono::seconds(10)));
  CHECK(std::chrono::steady_clock::now() - killed < std::chrono::seconds(2));
}
