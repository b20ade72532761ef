// Issue 14, matrix item 6 with the head's tables in an external Redis
// (`--external-storage redis://HOST:PORT`): the test starts Debian's
// redis-server on a free loopback port, runs the head on it, SIGKILLs the
// head and starts a new one (a new session directory: nothing on disk to
// read) that reads every table back from Redis. SKIPPED (exit 77) without
// redis-server (scripts/install-test-deps) or without hiredis in the build.
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>

#include "lumen/common/head_client.h"
#include "lumen/lumen.h"
#include "test/core/test_support.h"

namespace {

using lumen::test::MultiNodeCluster;
using lumen::test::WaitUntil;

class Keeper {
 public:
  explicit Keeper(int64_t start) : n_(start) {}
  static Keeper* Create(int64_t start) { return new Keeper(start); }
  int64_t Add(int64_t x) { return n_ += x; }

 private:
  int64_t n_;
};

std::string g_redis;  // the redis-server binary

int FreeLoopbackPort() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  int port = -1;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  ::close(fd);
  return port;
}

// redis-server on 127.0.0.1:port, no persistence of its own, killed at scope exit.
class RedisServer {
 public:
  explicit RedisServer(int port) : port_(port) {
    pid_ = ::fork();
    if (pid_ == 0) {
      std::string p = std::to_string(port);
      ::execlp(g_redis.c_str(), g_redis.c_str(), "--port", p.c_str(), "--bind", "127.0.0.1",
               "--save", "", "--appendonly", "no", "--daemonize", "no", "--loglevel", "warning",
               static_cast<char*>(nullptr));
      std::_Exit(127);
    }
  }
  ~RedisServer() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  bool Ready() const {
    return WaitUntil(
        [&] {
          int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
          sockaddr_in addr{};
          addr.sin_family = AF_INET;
          addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
          addr.sin_port = htons(static_cast<uint16_t>(port_));
          bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
          ::close(fd);
          return ok;
        },
        std::chrono::seconds(10));
  }

 private:
  int port_;
  pid_t pid_ = -1;
};

}  // namespace

LUMEN_REMOTE(Keeper::Create, &Keeper::Add);

TEST_CASE("head restart with Redis storage: a new head on an empty session reads every table back",
          "[chaos]") {
  // Invariant: with --external-storage redis://..., a head SIGKILLed and
  // started again with a new session directory (no log on disk) serves the
  // same named detached actor, placement group, key-value entries and node
  // (under its old id) as before, from Redis alone.
  const int port = FreeLoopbackPort();
  REQUIRE(port > 0);
  RedisServer redis(port);
  REQUIRE(redis.Ready());
  const std::string url =
      "redis://127.0.0.1:" + std::to_string(port) + "/lumen-test-" + std::to_string(::getpid());
  MultiNodeCluster cluster({{{{"CPU", 2}}}}, {{"LUMEN_HEAD_EXTERNAL_STORAGE", url},
                                              {"LUMEN_HEAD_RETRY_PERIOD_MS", "100"},
                                              {"LUMEN_HEAD_RECONNECT_TIMEOUT_MS", "30000"}});
  const std::string head = cluster.head_address();
  REQUIRE(lumen::kv::Put("k", "in-redis", "redis-test"));
  auto keeper = lumen::Actor(Keeper::Create)
                    .SetName("redis-keeper")
                    .SetLifetime(lumen::ActorLifetime::kDetached)
                    .Remote(1);
  REQUIRE(*lumen::Get(keeper.Task(&Keeper::Add).Remote(1)) == 2);
  auto pg = lumen::CreatePlacementGroup({.name = "redis-pg", .bundles = {{{"CPU", 1}}}});
  REQUIRE(pg.Wait(std::chrono::seconds(20)));

  cluster.RestartHead(/*from_state=*/false);  // a new session dir: only Redis has the tables

  REQUIRE(WaitUntil(
      [&] {
        auto nodes = lumen::runtime::QueryNodes(head);
        return nodes.ok() && nodes->size() == 1 && nodes->front().alive &&
               nodes->front().id.Hex() == cluster.node_id(0);
      },
      std::chrono::seconds(20)));
  CHECK(lumen::kv::Get("k", "redis-test") == std::optional<std::string>("in-redis"));
  auto again = lumen::GetActor<Keeper>("redis-keeper");
  CHECK(*lumen::Get(again.Task(&Keeper::Add).Remote(1), std::chrono::seconds(20)) == 3);
  CHECK(pg.Info().state == "CREATED");
  again.Kill();
}

int main(int argc, char** argv) {
  if (const char* role = std::getenv("LUMEN_ROLE"); role && *role) lumen::Init(argc, argv);
#ifndef LUMEN_HAVE_HIREDIS
  std::printf("SKIPPED: this build has no hiredis (libhiredis-dev), so no Redis storage\n");
  return 77;
#endif
  std::string found;
  if (lumen::test::RunCommand("command -v redis-server", &found) != 0) {
    std::printf("SKIPPED: no redis-server here; scripts/install-test-deps installs Debian's\n");
    return 77;
  }
  while (!found.empty() && (found.back() == '\n' || found.back() == ' ')) found.pop_back();
  g_redis = found;
  // This run's own TMPDIR, as the other cluster tests do.
  const char* tmp = std::getenv("TMPDIR");
  std::string dir = std::string(tmp && *tmp ? tmp : "/tmp") + "/lumen-t-XXXXXX";
  if (::mkdtemp(dir.data()) == nullptr) return 1;
  ::setenv("TMPDIR", dir.c_str(), 1);
  int failed = Catch::Session().run(argc, argv);
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return failed == 0 ? 0 : 1;
}
