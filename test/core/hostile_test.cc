// Hostile peers against live daemons (`lumen start`): raw sockets that claim
// huge frames, never say hello, never read their replies, or flood the logs.
// Each test states the bound it checks; memory is the daemon's VmRSS from
// /proc/PID/status.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <capnp/any.h>
#include <capnp/schema.h>
#include <filesystem>
#include <functional>
#include <set>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "lumen/common/head_client.h"
#include "lumen/common/connection.h"
#include "lumen/common/ids.h"
#include "lumen/common/proto_util.h"
#include "test/core/test_support.h"

namespace {

using lumen::test::FilesIn;
using lumen::test::RunCommand;
using lumen::test::WaitUntil;
using Clock = std::chrono::steady_clock;

constexpr size_t kMiB = 1 << 20;

class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Fd& operator=(Fd&& o) noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(o.fd_, -1);
    return *this;
  }
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

// A cluster started with `lumen start --head` (its own processes, logging to
// the session's logs/), stopped with `lumen stop` at scope exit.
struct DetachedCluster {
  std::string session;
  int head_port = 0;
  std::string token;
  pid_t head_pid = 0;
  pid_t node_pid = 0;
  std::string node_tcp;   // host:port
  std::string node_unix;  // socket path
  std::string node_address;
  lumen::test::StopClustersAtExit stop{LUMEN_CLI_PATH};

  explicit DetachedCluster(const std::string& env, const std::string& flags = "") {
    std::string out;
    int rc = RunCommand(env + " " + LUMEN_CLI_PATH +
                            " start --head --num-cpus 1 --object-store-memory 67108864 " + flags,
                        &out);
    INFO(out);
    REQUIRE(rc == 0);
    auto at = out.find("session: ");
    REQUIRE(at != std::string::npos);
    session = out.substr(at + 9, out.find('\n', at) - at - 9);
    std::ifstream pids(session + "/cluster.pids");
    pids >> head_pid >> node_pid;
    REQUIRE(head_pid > 0);
    REQUIRE(node_pid > 0);
    std::ifstream head(session + "/head_address");
    std::string head_address;
    std::getline(head, head_address);
    head_port = std::stoi(head_address.substr(head_address.rfind(':') + 1));
    std::ifstream token_file(session + "/token");
    std::getline(token_file, token);
    if (!token.empty()) lumen::runtime::SetHeadToken(token);
    auto nodes = lumen::runtime::QueryNodes(head_reach());
    REQUIRE(nodes.ok());
    REQUIRE(nodes->size() == 1);
    std::string address = nodes->front().address;  // "host:port;/unix/path"
    node_address = address;
    node_tcp = address.substr(0, address.find(';'));
    node_unix = address.substr(address.find(';') + 1);
  }
  std::string head_reach() const { return absl::StrCat("127.0.0.1:", head_port); }
  std::string Log(const std::string& role) const {
    std::ifstream in(session + "/logs/" + role + ".log");
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
};

Fd ConnectTcp(const std::string& host_port) {
  auto colon = host_port.rfind(':');
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(std::stoi(host_port.substr(colon + 1))));
  REQUIRE(::inet_pton(AF_INET, host_port.substr(0, colon).c_str(), &addr.sin_addr) == 1);
  Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  REQUIRE(::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  return fd;
}

Fd ConnectUnix(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  REQUIRE(path.size() < sizeof(addr.sun_path));
  std::memcpy(addr.sun_path, path.data(), path.size());
  Fd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  REQUIRE(::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  return fd;
}

std::string Header(uint32_t length, uint32_t magic = lumen::kFrameMagic) {
  std::string h(8, '\0');
  std::memcpy(h.data(), &length, 4);
  std::memcpy(h.data() + 4, &magic, 4);
  return h;
}

void SendAll(int fd, const std::string& bytes) {
  REQUIRE(::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) ==
          static_cast<ssize_t>(bytes.size()));
}

std::string HelloFrame() {
  lumen::OutMessage out;
  lumen::runtime::InitHello(out.Init(), lumen::proto::Role::CLI);
  std::string frame;
  lumen::AppendFrame(out.builder(), &frame);
  return frame;
}

std::string GetNodesFrame(uint64_t request_id) {
  lumen::OutMessage out;
  auto env = out.Init();
  env.setRequestId(request_id);
  env.setGetNodes();
  std::string frame;
  lumen::AppendFrame(out.builder(), &frame);
  return frame;
}

// True once the daemon closed `fd`: EOF or a reset, after reading away what it sent.
bool ClosedByPeer(int fd) {
  char buf[65536];
  for (;;) {
    ssize_t n = ::recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n == 0) return true;
    if (n < 0) return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
  }
}

// Waits until every fd is closed by the daemon; returns when each closed,
// measured from `start`.
std::vector<std::chrono::milliseconds> WaitAllClosed(const std::vector<Fd>& fds, Clock::time_point start,
                                                     std::chrono::milliseconds timeout) {
  std::vector<std::chrono::milliseconds> when(fds.size(), std::chrono::milliseconds(-1));
  WaitUntil(
      [&] {
        bool all = true;
        for (size_t i = 0; i < fds.size(); ++i) {
          if (when[i].count() >= 0) continue;
          if (ClosedByPeer(fds[i].get())) {
            when[i] = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
          } else {
            all = false;
          }
        }
        return all;
      },
      timeout);
  return when;
}

size_t CountLines(const std::string& text, const std::string& needle) {
  size_t n = 0;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) n += line.find(needle) != std::string::npos ? 1 : 0;
  return n;
}

}  // namespace

TEST_CASE("Oversize frame claims and silent connections leave a token-protected head's memory bounded") {
  // A head listening beyond loopback (token required); its node stays on loopback.
  DetachedCluster cluster("LUMEN_HELLO_TIMEOUT_MS=2000",
                          "--host 0.0.0.0 --node-ip-address 127.0.0.1");
  REQUIRE(!cluster.token.empty());
  size_t rss_before = lumen::test::ProcStatusBytes(cluster.head_pid, "VmRSS:");
  REQUIRE(rss_before > 0);

  // 20 connections each claim a frame just under the 64 MiB limit, then fall
  // silent. Before the hello only a few KiB are allowed: each is closed at once.
  auto start = Clock::now();
  std::vector<Fd> claims;
  for (int i = 0; i < 20; ++i) {
    claims.push_back(ConnectTcp(cluster.head_reach()));
    SendAll(claims.back().get(), Header(64 * kMiB - 8));
  }
  auto closed = WaitAllClosed(claims, start, std::chrono::seconds(20));
  size_t rss_claims = lumen::test::ProcStatusBytes(cluster.head_pid, "VmRSS:");
  for (auto t : closed) {
    REQUIRE(t.count() >= 0);
    CHECK(t < std::chrono::milliseconds(1500));  // well before the 2 s hello deadline
  }

  // 20 connections that begin a small frame and never finish it stay until the
  // hello deadline (2 s), not longer than a few seconds past it.
  start = Clock::now();
  std::vector<Fd> silent;
  for (int i = 0; i < 20; ++i) {
    silent.push_back(ConnectTcp(cluster.head_reach()));
    SendAll(silent.back().get(), Header(8192) + std::string(64, 'x'));
  }
  size_t rss_silent = lumen::test::ProcStatusBytes(cluster.head_pid, "VmRSS:");
  closed = WaitAllClosed(silent, start, std::chrono::seconds(20));
  for (auto t : closed) {
    REQUIRE(t.count() >= 0);
    CHECK(t >= std::chrono::milliseconds(1900));
    CHECK(t < std::chrono::milliseconds(8000));
  }
  // Bound: 8 MiB of growth for all 40 (before: 20 x 64 MiB were allocated).
  CHECK(rss_claims < rss_before + 8 * kMiB);
  CHECK(rss_silent < rss_before + 8 * kMiB);
  WARN("head RSS: before " << rss_before / 1024 << " KiB, after 20 oversize claims "
                           << rss_claims / 1024 << " KiB, with 20 silent connections "
                           << rss_silent / 1024 << " KiB");
  // The head still serves those with the token.
  auto nodes = lumen::runtime::QueryNodes(cluster.head_reach());
  REQUIRE(nodes.ok());
  CHECK(nodes->size() == 1);
}

TEST_CASE("A head caps the connections that have not said hello") {
  DetachedCluster cluster("LUMEN_HELLO_TIMEOUT_MS=60000 LUMEN_MAX_PENDING_HELLOS=8");
  std::vector<Fd> waiting;
  for (int i = 0; i < 8; ++i) waiting.push_back(ConnectTcp(cluster.head_reach()));
  // The head accepts in connection order, so the ninth finds 8 waiting.
  std::vector<Fd> refused;
  refused.push_back(ConnectTcp(cluster.head_reach()));
  auto when = WaitAllClosed(refused, Clock::now(), std::chrono::seconds(20));
  REQUIRE(when[0].count() >= 0);
  CHECK(when[0] < std::chrono::seconds(10));  // refused, not held to the 60 s deadline
  // The 8 are still open.
  for (auto& fd : waiting) CHECK_FALSE(ClosedByPeer(fd.get()));
  // One says hello: a place frees up and a new connection is served.
  SendAll(waiting[0].get(), HelloFrame());
  REQUIRE(WaitUntil([&] { return lumen::runtime::QueryNodes(cluster.head_reach()).ok(); }));
  CHECK(cluster.Log("head").find("LUMEN_MAX_PENDING_HELLOS") != std::string::npos);
}

TEST_CASE("A client that never reads its replies is throttled then disconnected while others are served") {
  DetachedCluster cluster("LUMEN_MAX_SEND_QUEUE_BYTES=1048576 LUMEN_SEND_STALL_TIMEOUT_MS=3000");
  size_t rss_before = lumen::test::ProcStatusBytes(cluster.head_pid, "VmRSS:");
  Fd greedy = ConnectTcp(cluster.head_reach());
  int small = 64 << 10;
  ::setsockopt(greedy.get(), SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
  SendAll(greedy.get(), HelloFrame());
  // A batch of 1,000 GetNodes requests (each answered with the node table).
  std::string batch;
  for (uint64_t i = 1; i <= 1000; ++i) batch += GetNodesFrame(i);

  size_t sent_bytes = 0;
  size_t max_rss = rss_before;
  std::chrono::milliseconds worst_query(0);
  int queries = 0;
  bool disconnected = false;
  size_t offset = 0;
  auto start = Clock::now();
  auto last_query = Clock::now() - std::chrono::seconds(1);
  while (!disconnected && Clock::now() - start < std::chrono::seconds(60)) {
    // The greedy client writes as fast as the head takes it, never reading.
    ssize_t n = ::send(greedy.get(), batch.data() + offset, batch.size() - offset,
                       MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      sent_bytes += static_cast<size_t>(n);
      offset = (offset + static_cast<size_t>(n)) % batch.size();
    } else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      disconnected = true;  // reset by the head
    }
    pollfd p{greedy.get(), 0, 0};
    if (::poll(&p, 1, 0) == 1 && (p.revents & (POLLHUP | POLLERR))) disconnected = true;
    // A second client keeps asking; each answer must come promptly.
    if (Clock::now() - last_query >= std::chrono::milliseconds(50)) {
      last_query = Clock::now();
      auto t0 = Clock::now();
      auto nodes = lumen::runtime::QueryNodes(cluster.head_reach());
      REQUIRE(nodes.ok());
      worst_query = std::max(
          worst_query, std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0));
      ++queries;
      max_rss = std::max(max_rss, lumen::test::ProcStatusBytes(cluster.head_pid, "VmRSS:"));
    }
  }
  CHECK(disconnected);
  CHECK(queries > 10);
  // Bound: the other client is answered within 1 s throughout.
  CHECK(worst_query < std::chrono::milliseconds(1000));
  // Bound: the head grows by less than 32 MiB (1 MiB queue + socket buffers),
  // however much the greedy client sent (before: 56 MB of requests -> 817 MiB).
  CHECK(max_rss < rss_before + 32 * kMiB);
  WARN("non-reading client sent " << sent_bytes / 1024 << " KiB; head RSS before "
                                  << rss_before / 1024 << " KiB, peak " << max_rss / 1024
                                  << " KiB; slowest other query " << worst_query.count() << " ms");
  REQUIRE(WaitUntil([&] { return cluster.Log("head").find("unread") != std::string::npos; }));
}

TEST_CASE("A flood of bad connections produces a bounded number of log lines") {
  DetachedCluster cluster("");
  constexpr int kBad = 300;
  auto start = Clock::now();
  std::vector<Fd> bad;
  for (int i = 0; i < kBad; ++i) {
    bad.push_back(ConnectTcp(cluster.head_reach()));
    SendAll(bad.back().get(), Header(16, 0x21444142));  // wrong magic
    if (bad.size() == 50) {
      // In batches, so the test's own descriptors stay few.
      for (auto t : WaitAllClosed(bad, start, std::chrono::seconds(20))) REQUIRE(t.count() >= 0);
      bad.clear();
    }
  }
  // After the flood, one more bad connection a period later reports how many
  // lines were suppressed.
  REQUIRE(WaitUntil(
      [&] {
        Fd one = ConnectTcp(cluster.head_reach());
        SendAll(one.get(), Header(16, 0x21444142));
        std::vector<Fd> v;
        v.push_back(std::move(one));
        WaitAllClosed(v, Clock::now(), std::chrono::seconds(5));
        return cluster.Log("head").find("similar messages suppressed") != std::string::npos;
      },
      std::chrono::seconds(20)));
  double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  std::string log = cluster.Log("head");
  size_t lines = CountLines(log, "closed the connection from");
  // Bound: 5 lines a second (the limiter's rate), plus one window's worth.
  CHECK(lines <= static_cast<size_t>(5 * (seconds + 2)));
  CHECK(lines < kBad / 4);
  // Each names the peer and the reason.
  CHECK(log.find("closed the connection from 127.0.0.1:") != std::string::npos);
  CHECK(log.find("bad frame header") != std::string::npos);
  WARN(kBad << " bad connections in " << seconds << " s: " << lines << " log lines");
}

TEST_CASE("Oversize frame claims against a node daemon's Unix socket and TCP port leave it bounded") {
  DetachedCluster cluster("LUMEN_HELLO_TIMEOUT_MS=2000");
  size_t rss_before = lumen::test::ProcStatusBytes(cluster.node_pid, "VmRSS:");
  auto start = Clock::now();
  std::vector<Fd> claims;
  for (int i = 0; i < 10; ++i) {
    claims.push_back(ConnectUnix(cluster.node_unix));
    SendAll(claims.back().get(), Header(64 * kMiB - 8));
    claims.push_back(ConnectTcp(cluster.node_tcp));
    SendAll(claims.back().get(), Header(64 * kMiB - 8));
  }
  auto closed = WaitAllClosed(claims, start, std::chrono::seconds(20));
  for (auto t : closed) {
    REQUIRE(t.count() >= 0);
    CHECK(t < std::chrono::milliseconds(1500));
  }
  size_t rss_claims = lumen::test::ProcStatusBytes(cluster.node_pid, "VmRSS:");

  // After a valid hello (loopback needs no token) big frames are allowed; 20
  // clients each claim 60 MiB and send 1 KiB of it. Memory follows the bytes.
  std::vector<Fd> helloed;
  for (int i = 0; i < 10; ++i) {
    for (bool unix_socket : {true, false}) {
      helloed.push_back(unix_socket ? ConnectUnix(cluster.node_unix) : ConnectTcp(cluster.node_tcp));
      SendAll(helloed.back().get(), HelloFrame());
      SendAll(helloed.back().get(), Header(60 * kMiB) + std::string(1024, 'x'));
    }
  }
  // The daemon has read what they sent once a fresh query is answered after them.
  REQUIRE(lumen::runtime::QueryNodeStats(cluster.node_address).ok());
  size_t rss_helloed = lumen::test::ProcStatusBytes(cluster.node_pid, "VmRSS:");
  for (auto& fd : helloed) CHECK_FALSE(ClosedByPeer(fd.get()));  // legitimate, kept
  // Bound: 8 MiB of growth (before: 20 x 60 MiB).
  CHECK(rss_claims < rss_before + 8 * kMiB);
  CHECK(rss_helloed < rss_before + 8 * kMiB);
  WARN("node daemon RSS: before " << rss_before / 1024 << " KiB, after 20 oversize claims "
                                  << rss_claims / 1024 << " KiB, with 20 helloed 60 MiB claims "
                                  << rss_helloed / 1024 << " KiB");
}

namespace {

class Named {
 public:
  static Named* Create() { return new Named; }
  int Ping() { return 1; }
};

}  // namespace

LUMEN_REMOTE(Named::Create, &Named::Ping);

namespace {

// Sets environment variables for the cluster a test starts (its daemons inherit
// them) and restores them at scope exit.
class ScopedEnv {
 public:
  explicit ScopedEnv(std::vector<std::pair<std::string, std::string>> vars) {
    for (auto& [name, value] : vars) {
      const char* old = std::getenv(name.c_str());
      saved_.emplace_back(name, old ? std::optional<std::string>(old) : std::nullopt);
      ::setenv(name.c_str(), value.c_str(), 1);
    }
  }
  ~ScopedEnv() {
    for (auto& [name, old] : saved_) {
      if (old) {
        ::setenv(name.c_str(), old->c_str(), 1);
      } else {
        ::unsetenv(name.c_str());
      }
    }
  }

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

}  // namespace

TEST_CASE("The head refuses placement groups and named actors over its limits, naming them") {
  ScopedEnv env({{"LUMEN_MAX_PLACEMENT_GROUPS", "2"}, {"LUMEN_MAX_NAMED_ACTORS", "2"}});
  lumen::test::ScopedCluster cluster;
  auto make_group = [] {
    return lumen::CreatePlacementGroup({.name = "", .bundles = {{{"CPU", 0.1}}},
                                        .strategy = lumen::PlacementStrategy::PACK});
  };
  auto a = make_group();
  auto b = make_group();
  try {
    make_group();
    FAIL("a third placement group was created over a limit of 2");
  } catch (const lumen::PlacementGroupError& e) {
    CHECK(std::string(e.what()).find("LUMEN_MAX_PLACEMENT_GROUPS") != std::string::npos);
  }
  // Removing one makes room again.
  lumen::RemovePlacementGroup(a.GetID());
  auto c = make_group();
  CHECK(c.Wait(std::chrono::seconds(20)));

  auto first = lumen::Actor(Named::Create).SetName("first").Remote();
  auto second = lumen::Actor(Named::Create).SetName("second").Remote();
  CHECK(*lumen::Get(first.Task(&Named::Ping).Remote()) == 1);
  try {
    lumen::Actor(Named::Create).SetName("third").Remote();
    FAIL("a third named actor was registered over a limit of 2");
  } catch (const lumen::Error& e) {
    CHECK(std::string(e.what()).find("LUMEN_MAX_NAMED_ACTORS") != std::string::npos);
  }
  try {
    lumen::Actor(Named::Create).SetName(std::string(2000, 'n')).Remote();
    FAIL("an actor name of 2000 bytes was accepted");
  } catch (const lumen::Error& e) {
    CHECK(std::string(e.what()).find("over the limit of 1024 bytes") != std::string::npos);
  }
  // The head still serves: the existing actors answer.
  CHECK(*lumen::Get(second.Task(&Named::Ping).Remote()) == 1);
}

TEST_CASE("A node daemon refuses lease requests past a client's queue limit") {
  DetachedCluster cluster("LUMEN_MAX_QUEUED_LEASES_PER_CLIENT=5");
  Fd fd = ConnectUnix(cluster.node_unix);
  timeval limit{20, 0};
  ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof(limit));
  {
    lumen::OutMessage out;
    // A job's owner from elsewhere: no workers start until a lease is granted.
    auto hello = lumen::runtime::InitHello(out.Init(), lumen::proto::Role::REMOTE_OWNER);
    auto job = lumen::JobId::Random();
    hello.setJobId(lumen::DataOf(job));
    hello.setExePath("/bin/false");
    REQUIRE(lumen::WriteFrameBlocking(fd.get(), out.builder()).ok());
  }
  std::vector<capnp::word> words;
  // Eight requests for a resource no node has: each is parked (infeasible).
  for (uint64_t i = 1; i <= 8; ++i) {
    lumen::OutMessage out;
    auto env = out.Init();
    env.setRequestId(i);
    auto req = env.initRequestLease();
    lumen::SetResources(req.initResources(1), std::map<std::string, double>{{"tpu", 1}});
    req.setName("Hostile");
    REQUIRE(lumen::WriteFrameBlocking(fd.get(), out.builder()).ok());
  }
  // Five get the "waiting" notice; the last three are refused, naming the limit.
  int waiting = 0;
  std::vector<std::string> refusals;
  while (waiting + static_cast<int>(refusals.size()) < 8) {
    REQUIRE(lumen::ReadFrameBlocking(fd.get(), 1 << 20, &words).ok());
    capnp::FlatArrayMessageReader reader(kj::arrayPtr(words.data(), words.size()));
    auto env = reader.getRoot<lumen::proto::Envelope>();
    if (!env.isLeaseReply()) continue;
    auto reply = env.getLeaseReply();
    if (reply.getWaiting()) {
      ++waiting;
    } else {
      CHECK_FALSE(reply.getGranted());
      refusals.emplace_back(reply.getError().cStr());
    }
  }
  CHECK(waiting == 5);
  REQUIRE(refusals.size() == 3);
  for (const auto& r : refusals) CHECK(r.find("LUMEN_MAX_QUEUED_LEASES_PER_CLIENT") != std::string::npos);
}

// Says hello to the node daemon at `unix_path` as a remote owner of a new job
// speaking `version`; returns the HelloReply's ok and error, and whether the
// daemon then closed the connection (EOF, waited for only after a refusal).
struct HelloOutcome {
  bool ok = false;
  std::string error;
  bool closed = false;
};
HelloOutcome RemoteOwnerHello(const std::string& unix_path, uint32_t version) {
  Fd fd = ConnectUnix(unix_path);
  timeval limit{20, 0};
  ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof(limit));
  lumen::OutMessage out;
  auto hello = lumen::runtime::InitHello(out.Init(), lumen::proto::Role::REMOTE_OWNER);
  hello.setProtocolVersion(version);
  hello.setJobId(lumen::DataOf(lumen::JobId::Random()));
  REQUIRE(lumen::WriteFrameBlocking(fd.get(), out.builder()).ok());
  std::vector<capnp::word> words;
  REQUIRE(lumen::ReadFrameBlocking(fd.get(), 1 << 20, &words).ok());
  capnp::FlatArrayMessageReader reader(kj::arrayPtr(words.data(), words.size()));
  auto env = reader.getRoot<lumen::proto::Envelope>();
  REQUIRE(env.isHelloReply());
  HelloOutcome outcome{env.getHelloReply().getOk(), env.getHelloReply().getError().cStr()};
  char byte = 0;
  if (!outcome.ok) outcome.closed = ::recv(fd.get(), &byte, 1, 0) == 0;
  return outcome;
}

TEST_CASE("A node daemon refuses a hello of another protocol version with a reply saying why, then closes, and keeps serving") {
  // Invariant: a refused peer learns the reason from a HelloReply (ok = false)
  // before its connection closes; the daemon goes on serving others.
  DetachedCluster cluster("");
  for (uint32_t version : {0u, 99u}) {
    INFO("protocol version " << version);
    HelloOutcome refused = RemoteOwnerHello(cluster.node_unix, version);
    CHECK_FALSE(refused.ok);
    CHECK(refused.error.find("protocol version") != std::string::npos);
    CHECK(refused.closed);
  }
  HelloOutcome welcomed = RemoteOwnerHello(cluster.node_unix, lumen::proto::PROTOCOL_VERSION);
  CHECK(welcomed.ok);
}

namespace {

// Raw Cap'n Proto messages for the malformed-frame cases: a flat array is a
// segment table (u32 count - 1, a u32 size per segment, padded to a word) and
// the segments; a struct pointer is (offset << 2) | 0 in the low half and
// data words | pointer count << 16 in the high half.
uint64_t StructPointer(int32_t offset_words, uint16_t data_words, uint16_t pointers) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(offset_words) << 2)) |
         (static_cast<uint64_t>(data_words) << 32) | (static_cast<uint64_t>(pointers) << 48);
}

std::string Words(const std::vector<uint64_t>& words) {
  std::string out(words.size() * 8, '\0');
  std::memcpy(out.data(), words.data(), out.size());
  return out;
}

// One segment holding `segment`.
std::string OneSegment(const std::vector<uint64_t>& segment) {
  return Words({static_cast<uint64_t>(segment.size()) << 32}) + Words(segment);
}

std::string Framed(const std::string& payload) { return Header(static_cast<uint32_t>(payload.size())) + payload; }

// A frame whose table claims `segments` segments of 0 words (count - 1 = `first`).
std::string SegmentTableFrame(uint32_t first, size_t table_words) {
  std::string payload(table_words * 8, '\0');
  std::memcpy(payload.data(), &first, 4);
  return Framed(payload);
}

// A chain of `depth` structs, each with one pointer to the next.
std::string DeepNestingFrame(int depth) {
  std::vector<uint64_t> segment;
  for (int i = 0; i < depth; ++i) segment.push_back(StructPointer(0, 0, 1));
  segment.push_back(0);
  return Framed(OneSegment(segment));
}

// A struct with two pointers, both to itself: a walk that follows them visits
// 2^depth structs unless a limit stops it.
std::string CyclicFrame() {
  return Framed(OneSegment({StructPointer(0, 0, 2), StructPointer(-1, 0, 2), StructPointer(-2, 0, 2)}));
}

// The frame of the Envelope `fill` builds.
template <typename Fill>
std::string EnvelopeFrame(Fill fill) {
  lumen::OutMessage out;
  fill(out.Init());
  std::string frame;
  lumen::AppendFrame(out.builder(), &frame);
  return frame;
}

// An Envelope whose message type (the union's discriminant) is `type`.
std::string UnknownTypeFrame(uint16_t type) {
  return EnvelopeFrame([&](lumen::proto::Envelope::Builder env) {
    env.setRequestId(7);
    env.setGetNodes();
    auto offset = capnp::Schema::from<lumen::proto::Envelope>()
                      .getProto().getStruct().getDiscriminantOffset();
    capnp::AnyStruct::Builder any = lumen::proto::Envelope::Builder(env);
    auto data = any.getDataSection();
    std::memcpy(data.begin() + offset * 2, &type, 2);
  });
}

// The pointer slot of field `name` in struct `T`.
template <typename T>
uint32_t PointerSlot(const char* name) {
  return capnp::Schema::from<T>().getFieldByName(name).getProto().getSlot().getOffset();
}

// To the head: a placement group whose `bundles` is a list of 2^29 - 1 Voids
// (the most a list pointer can count; no bytes on the wire: reading it as that
// many bundles is what must be refused).
std::string VoidListPlacementGroupFrame() {
  return EnvelopeFrame([](lumen::proto::Envelope::Builder env) {
    env.setRequestId(8);
    auto spec = env.initCreatePlacementGroup();
    spec.setName("void");
    capnp::AnyStruct::Builder any = lumen::proto::PlacementGroupSpec::Builder(spec);
    any.getPointerSection()[PointerSlot<lumen::proto::PlacementGroupSpec>("bundles")]
        .initAsAnyList(capnp::ElementSize::VOID, (1u << 29) - 1);
  });
}

// To a node: a lease request whose `resources` is a list of 2^29 - 1 Voids.
std::string VoidListLeaseFrame() {
  return EnvelopeFrame([](lumen::proto::Envelope::Builder env) {
    env.setRequestId(9);
    auto req = env.initRequestLease();
    capnp::AnyStruct::Builder any = lumen::proto::LeaseRequest::Builder(req);
    any.getPointerSection()[PointerSlot<lumen::proto::LeaseRequest>("resources")]
        .initAsAnyList(capnp::ElementSize::VOID, (1u << 29) - 1);
  });
}

// A raw connection that said hello (as the CLI) and waits for replies.
Fd HelloedConnection(const std::function<Fd()>& connect, bool expect_hello_reply) {
  Fd fd = connect();
  timeval limit{20, 0};
  ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof(limit));
  SendAll(fd.get(), HelloFrame());
  if (expect_hello_reply) {
    std::vector<capnp::word> words;
    REQUIRE(lumen::ReadFrameBlocking(fd.get(), 16 << 20, &words).ok());
  }
  return fd;
}

// Sends `request` on a helloed connection and reads frames until the reply
// with `request_id`; true when one came.
bool Answered(int fd, const std::string& request, uint64_t request_id) {
  SendAll(fd, request);
  std::vector<capnp::word> words;
  for (int i = 0; i < 100; ++i) {
    if (!lumen::ReadFrameBlocking(fd, 64 << 20, &words).ok()) return false;
    capnp::FlatArrayMessageReader reader(kj::arrayPtr(words.data(), words.size()));
    if (reader.getRoot<lumen::proto::Envelope>().getRequestId() == request_id) return true;
  }
  return false;
}

struct MalformedCase {
  std::string name;
  bool after_hello;    // sent after a valid hello (the full frame limit applies)
  std::string bytes;   // what the hostile peer sends
  bool then_eof;       // and then closes its side
  std::string reason;  // in the daemon's log line for it
  std::string daemon;  // "head", "node" or "" (both)
};

}  // namespace

TEST_CASE("Malformed frames against a live head and node close only their connection with a log line and bounded memory") {
  // Invariant: for each malformed input the daemon closes that one connection
  // and logs why (naming the peer and the reason); its peak memory grows by
  // less than the 64 MiB frame cap over all cases; a client connected before
  // and a new client are served throughout.
  DetachedCluster cluster("LUMEN_HELLO_TIMEOUT_MS=2000");
  const std::vector<MalformedCase> cases = {
      {"segment count 0xFFFFFFFF", false, SegmentTableFrame(0xFFFFFFFEu, 2), false,
       "4294967295 segments", ""},
      {"segment count wrapping to 0", false, SegmentTableFrame(0xFFFFFFFFu, 2), false,
       "4294967296 segments", ""},
      {"512 segments", true, SegmentTableFrame(511, 257), false, "512 segments", ""},
      // 2^21 claimed segments in a 16 MiB frame: Cap'n Proto alone would
      // allocate 32 MiB of segment entries for it.
      {"2^21 segments in a 16 MiB frame", true, SegmentTableFrame((1u << 21) - 1, 2u << 20),
       false, "2097152 segments", ""},
      {"declared length 4 GiB", false, Header(0xFFFFFFF8u), false, "exceeds the limit", ""},
      {"declared length 4 GiB after hello", true, Header(0xFFFFFFF8u), false,
       "exceeds the limit", ""},
      {"nesting 1,000 deep", true, DeepNestingFrame(1000), false, "too deeply-nested", ""},
      {"cyclic pointers", true, CyclicFrame(), false, "malformed message", ""},
      {"2^29 - 1 Voids as placement-group bundles", true, VoidListPlacementGroupFrame(), false,
       "traversal limit", "head"},
      {"2^29 - 1 Voids as lease resources", true, VoidListLeaseFrame(), false, "traversal limit", "node"},
      {"truncated message inside its frame", true,
       Framed(Words({uint64_t{10} << 32, StructPointer(0, 1, 0)})), false, "segments need 11 words", ""},
      {"truncated frame, then EOF", true, Header(64) + std::string(16, 'x'), true,
       "in the middle of a frame (24 of 72 bytes)", ""},
      {"unknown message type", true, UnknownTypeFrame(999), false, "unknown message type 999", ""},
  };

  auto head_connect = [&] { return ConnectTcp(cluster.head_reach()); };
  auto node_connect = [&] { return ConnectUnix(cluster.node_unix); };
  // Clients connected before the attacks, served after them.
  Fd head_client = HelloedConnection(head_connect, false);
  Fd node_client = HelloedConnection(node_connect, true);
  REQUIRE(Answered(head_client.get(), GetNodesFrame(1), 1));
  size_t head_peak_before = lumen::test::ProcStatusBytes(cluster.head_pid, "VmHWM:");
  size_t node_peak_before = lumen::test::ProcStatusBytes(cluster.node_pid, "VmHWM:");
  REQUIRE(head_peak_before > 0);
  REQUIRE(node_peak_before > 0);

  for (const MalformedCase& c : cases) {
    for (const std::string daemon : {"head", "node"}) {
      if (!c.daemon.empty() && c.daemon != daemon) continue;
      INFO(c.name << " against the " << daemon);
      // Log lines are rate-limited (5 a second): send again until it shows.
      size_t before = CountLines(cluster.Log(daemon), c.reason);
      bool logged = WaitUntil(
          [&] {
            Fd fd = daemon == "head" ? head_connect() : node_connect();
            if (c.after_hello) {
              SendAll(fd.get(), HelloFrame());
            }
            SendAll(fd.get(), c.bytes);
            if (c.then_eof) ::shutdown(fd.get(), SHUT_WR);
            std::vector<Fd> one;
            one.push_back(std::move(fd));
            auto closed = WaitAllClosed(one, Clock::now(), std::chrono::seconds(10));
            REQUIRE(closed[0].count() >= 0);
            return CountLines(cluster.Log(daemon), c.reason) > before;
          },
          std::chrono::seconds(20));
      std::string log = cluster.Log(daemon);
      INFO("the end of its log: " << log.substr(log.size() - std::min<size_t>(log.size(), 1500)));
      CHECK(logged);
    }
  }

  // A slow sender: a hello at 5 bytes a second is closed at the hello deadline.
  for (const std::string daemon : {"head", "node"}) {
    INFO("slow sender against the " << daemon);
    Fd fd = daemon == "head" ? head_connect() : node_connect();
    std::string hello = HelloFrame();
    auto start = Clock::now();
    size_t sent = 0;
    bool closed = false;
    while (!closed && Clock::now() - start < std::chrono::seconds(10)) {
      if (sent < hello.size()) {
        ::send(fd.get(), hello.data() + sent, 1, MSG_NOSIGNAL);
        ++sent;
      }
      pollfd p{fd.get(), POLLIN, 0};
      // Waits 200 ms for the daemon to close (the pace of the sender).
      if (::poll(&p, 1, 200) == 1) closed = ClosedByPeer(fd.get());
    }
    CHECK(closed);
    CHECK(Clock::now() - start >= std::chrono::milliseconds(1900));
    CHECK(sent < hello.size());
    CHECK(WaitUntil([&] { return cluster.Log(daemon).find("no hello within 2000 ms") != std::string::npos; }));
  }

  size_t head_peak = lumen::test::ProcStatusBytes(cluster.head_pid, "VmHWM:");
  size_t node_peak = lumen::test::ProcStatusBytes(cluster.node_pid, "VmHWM:");
  WARN("peak RSS growth over the malformed frames: head " << (head_peak - head_peak_before) / 1024
                                                          << " KiB, node "
                                                          << (node_peak - node_peak_before) / 1024
                                                          << " KiB");
  // Bound: less than the 64 MiB frame cap. The largest case is a 16 MiB frame
  // (buffered once, up to 32 MiB while its buffer grows); before the segment
  // table was checked, its 2^21 claimed segments cost another 32 MiB.
#if !defined(__SANITIZE_ADDRESS__)  // ASan's quarantine keeps up to 256 MiB of freed memory
  CHECK(head_peak < head_peak_before + 48 * kMiB);
  CHECK(node_peak < node_peak_before + 48 * kMiB);
#endif
  // The clients from before, and a new one, are served.
  CHECK(Answered(head_client.get(), GetNodesFrame(2), 2));
  std::string stats_frame;
  {
    lumen::OutMessage out;
    auto env = out.Init();
    env.setRequestId(3);
    env.setGetNodeStats();
    lumen::AppendFrame(out.builder(), &stats_frame);
  }
  CHECK(Answered(node_client.get(), stats_frame, 3));
  CHECK(lumen::runtime::QueryNodes(cluster.head_reach()).ok());
  CHECK(lumen::runtime::QueryNodeStats(cluster.node_address).ok());
}

namespace {

// The socket inodes a process holds open.
std::set<std::string> SocketInodes(pid_t pid) {
  std::set<std::string> inodes;
  std::error_code ec;
  for (const auto& entry :
       std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec)) {
    std::error_code link_ec;
    std::string target = std::filesystem::read_symlink(entry.path(), link_ec).string();
    if (target.rfind("socket:[", 0) == 0) inodes.insert(target.substr(8, target.size() - 9));
  }
  return inodes;
}

// The local addresses ("7F000001:1F90" as /proc/net/tcp writes them, or the
// IPv6 form) of the TCP sockets `pid` listens on.
std::vector<std::string> ListeningAddresses(pid_t pid) {
  std::set<std::string> inodes = SocketInodes(pid);
  std::vector<std::string> out;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      std::istringstream fields(line);
      std::string slot, local, remote, state, queues, timer, retransmits, uid, timeout, inode;
      fields >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> uid >>
          timeout >> inode;
      if (state == "0A" && inodes.contains(inode)) out.push_back(local);  // 0A: LISTEN
    }
  }
  return out;
}

bool IsLoopbackListen(const std::string& local) {
  std::string host = local.substr(0, local.find(':'));
  // 127.0.0.0/8 in /proc's little-endian hex ends in 7F; ::1 is 0...01000000.
  if (host.size() == 8) return host.substr(6) == "7F";
  return host == "00000000000000000000000001000000";
}

// Every file under `dir` (recursively) whose contents include `needle`,
// except those named `except`.
std::vector<std::string> FilesContaining(const std::string& dir, const std::string& needle,
                                         const std::string& except) {
  std::vector<std::string> found;
  std::error_code ec;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir, ec)) {
    std::error_code type_ec;
    if (!entry.is_regular_file(type_ec) || entry.path().filename() == except) continue;
    std::ifstream in(entry.path(), std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    if (s.str().find(needle) != std::string::npos) found.push_back(entry.path().string());
  }
  return found;
}

std::string TokenHello(lumen::proto::Role role, const std::string& token) {
  return EnvelopeFrame([&](lumen::proto::Envelope::Builder env) {
    lumen::runtime::InitHello(env, role).setToken(token);
  });
}

}  // namespace

TEST_CASE("Auth: by default the head and the node daemon listen on loopback only") {
  // Invariant: a cluster started without --host / --node-ip-address has no
  // TCP listener outside 127.0.0.0/8 or ::1, and needs no token. (Workers
  // listen on the node's host, the same setting.)
  DetachedCluster cluster("");
  CHECK(cluster.token.empty());
  std::vector<pid_t> pids = {cluster.head_pid, cluster.node_pid};
  size_t listeners = 0;
  for (pid_t pid : pids) {
    for (const std::string& local : ListeningAddresses(pid)) {
      INFO("pid " << pid << " listens on " << local);
      CHECK(IsLoopbackListen(local));
      ++listeners;
    }
  }
  // The head's port, the node's port and its transfer server at least.
  CHECK(listeners >= 3);
}

TEST_CASE("Auth: a head or node daemon asked to listen beyond loopback without a token refuses to start") {
  // Invariant: no daemon listens on a network address unless every connection
  // must carry the token; with none to compare with it exits at once, naming why.
  std::string dir = (std::filesystem::temp_directory_path() /
                     ("lumen-auth-test-" + std::to_string(::getpid())))
                        .string();
  std::filesystem::create_directories(dir);
  std::string out;
  int head_rc = RunCommand(std::string("timeout 30 env -u LUMEN_TOKEN LUMEN_ROLE=head ") +
                               "LUMEN_HEAD_HOST=0.0.0.0 LUMEN_HEAD_PORT=0 " + LUMEN_CLI_PATH,
                           &out);
  INFO(out);
  CHECK(head_rc == 1);
  CHECK(out.find("listens on 0.0.0.0 but has no token") != std::string::npos);
  int node_rc = RunCommand(std::string("timeout 30 env -u LUMEN_TOKEN LUMEN_ROLE=node ") +
                               "LUMEN_NODE_HOST=0.0.0.0 LUMEN_SESSION_DIR=" + dir +
                               " LUMEN_OBJECT_STORE_BYTES=67108864 " + LUMEN_CLI_PATH,
                           &out);
  INFO(out);
  CHECK(node_rc == 1);
  CHECK(out.find("listen on 0.0.0.0 without a cluster token") != std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST_CASE("Auth: a missing or wrong token is refused before anything runs and the token is in no log") {
  // Invariant: on a cluster listening beyond loopback, a hello without the
  // token or with a wrong one closes the connection before any frame after it
  // is decoded (no reply, no effect), with a log line naming the peer; the
  // token appears in no log file, nor in the output of the commands that use it.
  DetachedCluster cluster("LUMEN_LOG_LEVEL=debug", "--host 0.0.0.0 --node-ip-address 0.0.0.0");
  const std::string token = cluster.token;
  REQUIRE(token.size() >= 32);
  std::string wrong = token;
  wrong.back() = wrong.back() == 'a' ? 'b' : 'a';
  std::string node_tcp = "127.0.0.1" + cluster.node_tcp.substr(cluster.node_tcp.rfind(':'));

  // A key the refused peers try to set, and requests they pipeline after the
  // hello in the same write.
  auto kv_put = EnvelopeFrame([](lumen::proto::Envelope::Builder env) {
    env.setRequestId(41);
    auto kv = env.initKvPut();
    kv.setKey("c3-refused-peer-was-here");
    kv.setValue(kj::StringPtr("x").asBytes());
  });
  struct Attempt {
    std::string name;
    std::string hello;
    std::string reason;
  };
  const std::vector<Attempt> attempts = {
      {"no token", TokenHello(lumen::proto::Role::CLI, ""), "connection without the cluster token"},
      {"wrong token", TokenHello(lumen::proto::Role::CLI, wrong), "connection with a wrong cluster token"},
      {"wrong token as a driver", TokenHello(lumen::proto::Role::DRIVER, wrong),
       "connection with a wrong cluster token"},
  };
  for (const Attempt& a : attempts) {
    for (const std::string daemon : {"head", "node"}) {
      INFO(a.name << " against the " << daemon);
      size_t before = CountLines(cluster.Log(daemon), a.reason);
      bool logged = WaitUntil(
          [&] {
            Fd fd = daemon == "head" ? ConnectTcp(cluster.head_reach()) : ConnectTcp(node_tcp);
            SendAll(fd.get(), a.hello + kv_put + GetNodesFrame(42));
            // Nothing comes back before the close.
            std::string got;
            char buf[4096];
            pollfd p{fd.get(), POLLIN, 0};
            for (;;) {
              REQUIRE(::poll(&p, 1, 10000) == 1);
              ssize_t n = ::recv(fd.get(), buf, sizeof(buf), 0);
              if (n <= 0) break;
              got.append(buf, static_cast<size_t>(n));
            }
            CHECK(got.empty());
            return CountLines(cluster.Log(daemon), a.reason) > before;
          },
          std::chrono::seconds(20));
      CHECK(logged);
    }
  }
  // The pipelined put had no effect.
  auto reply = lumen::runtime::CallHead(cluster.head_reach(), [](lumen::proto::Envelope::Builder env) {
    env.setKvGet("c3-refused-peer-was-here");
  });
  REQUIRE(reply.ok());
  capnp::FlatArrayMessageReader reader(kj::arrayPtr(reply->data(), reply->size()));
  auto env = reader.getRoot<lumen::proto::Envelope>();
  REQUIRE(env.isKvReply());
  CHECK_FALSE(env.getKvReply().getFound());

  // A job, the CLI's queries, all with the token: then search for it.
  std::string reach = cluster.head_reach();
  std::string outputs;
  std::string out;
  int rc = RunCommand("LUMEN_ADDRESS=" + reach + " LUMEN_TOKEN=" + token +
                          " LUMEN_LOG_LEVEL=debug " + LUMEN_QUICKSTART_PATH,
                      &out);
  INFO(out);
  CHECK(rc == 0);
  CHECK(out.find("Fibonacci(10) = 55") != std::string::npos);
  outputs += out;
  for (const char* command : {" status", " list nodes", " list tasks"}) {
    rc = RunCommand(std::string(LUMEN_CLI_PATH) + command + " --address " + reach + " --token " +
                        token,
                    &out);
    INFO(command << ": " << out);
    CHECK(rc == 0);
    outputs += out;
  }
  CHECK(outputs.find(token) == std::string::npos);
  CHECK(outputs.find(wrong) == std::string::npos);
  auto with_token = FilesContaining(cluster.session, token, "token");
  auto with_wrong = FilesContaining(cluster.session, wrong, "token");
  INFO("files with the token: " << absl::StrJoin(with_token, ", "));
  INFO("files with the wrong token: " << absl::StrJoin(with_wrong, ", "));
  CHECK(with_token.empty());
  CHECK(with_wrong.empty());
  // The logs are there and verbose: the search looked at something.
  CHECK(cluster.Log("head").find("wrong cluster token") != std::string::npos);
  CHECK(FilesIn(cluster.session + "/logs") >= 2);
}
