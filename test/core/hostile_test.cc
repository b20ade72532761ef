// Hostile peers against live daemons (`lumen start`): raw sockets that claim
// huge frames, never say hello, never read their replies, or flood the logs.
// Each test states the bound it checks; memory is the daemon's VmRSS from
// /proc/PID/status.
#include "test/core/hostile_support.h"

using namespace lumen::test::hostile;  // NOLINT: the helpers of these tests

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
