// The head's local socket (lumen/common/head_local_socket.h): a driver's
// calls to an embedded cluster's head (bound to 127.0.0.1) go over the head's
// abstract Unix socket, the node daemon's link too (the cluster only works if
// the head serves it there), and with LUMEN_HEAD_LOCAL_SOCKET=0 over TCP as
// before; a head bound beyond loopback has no local name.
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <string>

#include "lumen/common/head_connection_pool.h"
#include "lumen/common/head_local_socket.h"
#include "lumen/lumen.h"
#include "test/core/test_support.h"

namespace {

using lumen::runtime::HeadConnectionPool;
using lumen::test::ScopedCluster;

// The address family of the connection the driver's last head call left in
// the pool (-1 when none is pooled); the connection stays pooled.
int PooledFamily(const std::string& head) {
  HeadConnectionPool& pool = HeadConnectionPool::Instance();
  int64_t reply_ms = 0;
  int fd = pool.Take(head, &reply_ms);
  if (fd < 0) return -1;
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  int family = ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0 ? addr.ss_family : -1;
  pool.Give(head, fd, reply_ms);
  return family;
}

// Creates, waits for and removes a group: three head calls.
void GroupRoundTrip() {
  auto pg = lumen::CreatePlacementGroup({.bundles = {{{"CPU", 0.01}}}});
  REQUIRE(pg.Wait(std::chrono::seconds(20)));
  lumen::RemovePlacementGroup(pg.GetID());
}

}  // namespace

TEST_CASE("head calls go over the head's local socket on this host, over TCP when it is turned off") {
  ScopedCluster cluster;
  const std::string head = lumen::internal::ClusterAddress();
  REQUIRE(lumen::HeadLocalSocketName(head) == "@lumen-head-" + head);
  HeadConnectionPool::Instance().Clear();
  GroupRoundTrip();
  CHECK(PooledFamily(head) == AF_UNIX);

  HeadConnectionPool::Instance().Clear();
  ::setenv("LUMEN_HEAD_LOCAL_SOCKET", "0", 1);
  GroupRoundTrip();
  CHECK(PooledFamily(head) == AF_INET);
  ::unsetenv("LUMEN_HEAD_LOCAL_SOCKET");
  HeadConnectionPool::Instance().Clear();
}

TEST_CASE("only a head bound to a loopback address has a local socket name") {
  CHECK(lumen::HeadLocalSocketName("127.0.0.1:6379") == "@lumen-head-127.0.0.1:6379");
  CHECK(lumen::HeadLocalSocketName("localhost:6379") == "@lumen-head-localhost:6379");
  CHECK(lumen::HeadLocalSocketName("10.1.2.3:6379").empty());
  CHECK(lumen::HeadLocalSocketName("0.0.0.0:6379").empty());
  CHECK(lumen::HeadLocalSocketName("no-port").empty());
}
