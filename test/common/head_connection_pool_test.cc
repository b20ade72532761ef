// HeadConnectionPool and CallHead over it: a control call reuses the
// connection the previous one left idle (no connect, hello or accept per
// call), and a connection the head closed meanwhile is noticed and replaced
// before a request is written to it. The head here is a fake on a loopback
// listener served by one thread; it acks every request and counts the
// connections it accepted.
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstring>
#include <thread>

#include "lumen/common/connection.h"
#include "lumen/common/head_client.h"
#include "lumen/common/head_connection_pool.h"
#include "lumen/common/head_local_socket.h"

#include <catch2/catch.hpp>

namespace {

using lumen::OutMessage;
using lumen::runtime::HeadConnectionPool;

// A TCP socket listening on 127.0.0.1 at a free port; sets `*address` to
// "127.0.0.1:PORT".
int ListenOnLoopback(std::string* address) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  REQUIRE(::listen(fd, 8) == 0);
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  *address = "127.0.0.1:" + std::to_string(ntohs(addr.sin_port));
  return fd;
}

// Serves one connection at a time: hello, then acks each request; closes a
// connection after `close_after` requests (0: never).
class FakeHead {
 public:
  explicit FakeHead(int close_after) : close_after_(close_after) {
    listen_fd_ = ListenOnLoopback(&address_);
    thread_ = std::thread([this] { Serve(); });
  }
  ~FakeHead() {
    ::shutdown(listen_fd_, SHUT_RDWR);  // wakes the blocked accept
    thread_.join();
    ::close(listen_fd_);
  }
  const std::string& address() const { return address_; }
  int accepted() const { return accepted_.load(); }
  int served() const { return served_.load(); }

 private:
  void Serve() {
    for (;;) {
      int fd = ::accept(listen_fd_, nullptr, nullptr);
      if (fd < 0) return;
      ++accepted_;
      std::vector<capnp::word> words;
      bool hello = lumen::ReadFrameBlocking(fd, 1 << 20, &words).ok();
      for (int n = 0; hello && (close_after_ == 0 || n < close_after_); ++n) {
        if (!lumen::ReadFrameBlocking(fd, 1 << 20, &words).ok()) break;
        OutMessage out;
        out.Init().setAck();
        ++served_;  // before the reply: the caller may check it as soon as it has the reply
        if (!lumen::WriteFrameBlocking(fd, out.builder()).ok()) break;
      }
      ::close(fd);
    }
  }

  int close_after_;
  int listen_fd_ = -1;
  std::string address_;
  std::atomic<int> accepted_{0};
  std::atomic<int> served_{0};
  std::thread thread_;
};

void Call(const std::string& address) {
  auto reply = lumen::runtime::CallHead(address, [](lumen::proto::Envelope::Builder env) {
    env.setGetNodes();
  });
  REQUIRE(reply.ok());
}

}  // namespace

TEST_CASE("CallHead reuses the connection its previous call left idle") {
  HeadConnectionPool::Instance().Clear();
  FakeHead head(/*close_after=*/0);
  for (int i = 0; i < 20; ++i) Call(head.address());
  CHECK(head.served() == 20);
  CHECK(head.accepted() == 1);
  CHECK(HeadConnectionPool::Instance().IdleCount(head.address()) == 1);
  HeadConnectionPool::Instance().Clear();
  CHECK(HeadConnectionPool::Instance().IdleCount(head.address()) == 0);
}

TEST_CASE("A pooled connection the head closed is replaced before a request is written to it") {
  HeadConnectionPool::Instance().Clear();
  FakeHead head(/*close_after=*/1);  // like a head that restarted after each call
  for (int i = 0; i < 5; ++i) {
    Call(head.address());
    // The head closed it after its reply: wait until that is visible here,
    // so the next call must notice it (it is the only idle one).
    int fd = HeadConnectionPool::Instance().Take(head.address());
    if (fd >= 0) {
      pollfd p{.fd = fd, .events = POLLRDHUP, .revents = 0};
      REQUIRE(::poll(&p, 1, 5000) == 1);
      HeadConnectionPool::Instance().Give(head.address(), fd);
    }
  }
  CHECK(head.served() == 5);
  CHECK(head.accepted() == 5);
  HeadConnectionPool::Instance().Clear();
}

TEST_CASE("The pool keeps a bounded number of idle connections per head") {
  HeadConnectionPool& pool = HeadConnectionPool::Instance();
  pool.Clear();
  const std::string address = "127.0.0.1:1";  // never connected: the pool only holds descriptors
  for (size_t i = 0; i < HeadConnectionPool::kIdlePerAddress + 3; ++i) {
    int fds[2];
    REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) == 0);
    ::close(fds[1]);  // the peer: gone, so a Take must drop it
    pool.Give(address, fds[0]);
  }
  CHECK(pool.IdleCount(address) == HeadConnectionPool::kIdlePerAddress);
  CHECK(pool.Take(address) == -1);  // every one is closed at the other end
  CHECK(pool.IdleCount(address) == 0);
}

TEST_CASE("A forked child never takes a connection its parent pooled") {
  // Invariant: two processes never share one pooled connection (their
  // requests and replies would interleave): a child's Take skips what the
  // parent gave, and the parent still has it.
  HeadConnectionPool& pool = HeadConnectionPool::Instance();
  pool.Clear();
  const std::string address = "127.0.0.1:2";
  int fds[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) == 0);
  pool.Give(address, fds[0]);  // its peer stays open: a usable connection
  pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) _exit(pool.Take(address) == -1 ? 0 : 1);
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(pool.IdleCount(address) == 1);
  CHECK(pool.Take(address) == fds[0]);
  ::close(fds[0]);
  ::close(fds[1]);
}

namespace {

// Serves one connection: hello, then answers each request with `reply`
// (written whole), followed by `trailer` bytes when given.
class ScriptedHead {
 public:
  // `local`: listens on the head's local socket too (and serves only there);
  // `close_after_reply`: closes each connection after its first reply.
  ScriptedHead(std::string name_in_reply, std::string trailer, bool local = false,
               bool close_after_reply = false)
      : name_(std::move(name_in_reply)), trailer_(std::move(trailer)),
        close_after_reply_(close_after_reply) {
    listen_fd_ = ListenOnLoopback(&address_);
    int serve_fd = listen_fd_;
    if (local) {
      local_fd_ = ::socket(AF_UNIX, SOCK_STREAM, 0);
      const std::string name = lumen::HeadLocalSocketName(address_);
      sockaddr_un un{};
      un.sun_family = AF_UNIX;
      std::memcpy(un.sun_path, name.data(), name.size());
      un.sun_path[0] = '\0';
      REQUIRE(::bind(local_fd_, reinterpret_cast<sockaddr*>(&un),
                     static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + name.size())) == 0);
      REQUIRE(::listen(local_fd_, 8) == 0);
      serve_fd = local_fd_;
    }
    thread_ = std::thread([this, serve_fd] {
      for (;;) {
        int fd = ::accept(serve_fd, nullptr, nullptr);
        if (fd < 0) return;
        ++accepted_;
        std::vector<capnp::word> words;
        bool ok = lumen::ReadFrameBlocking(fd, 1 << 20, &words).ok();
        while (ok && lumen::ReadFrameBlocking(fd, 1 << 20, &words).ok()) {
          ++served_;
          OutMessage out;
          out.Init().initPlacementGroupState().setName(name_);
          std::string frame;
          lumen::AppendFrame(out.builder(), &frame);
          frame += trailer_;
          ok = ::send(fd, frame.data(), frame.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(frame.size());
          if (close_after_reply_) break;
        }
        ::close(fd);
      }
    });
  }
  ~ScriptedHead() {
    ::shutdown(listen_fd_, SHUT_RDWR);
    if (local_fd_ >= 0) ::shutdown(local_fd_, SHUT_RDWR);
    thread_.join();
    ::close(listen_fd_);
    if (local_fd_ >= 0) ::close(local_fd_);
  }
  int served() const { return served_.load(); }
  const std::string& address() const { return address_; }
  int accepted() const { return accepted_.load(); }

 private:
  std::string name_, trailer_;
  bool close_after_reply_;
  int listen_fd_ = -1;
  int local_fd_ = -1;
  std::string address_;
  std::atomic<int> accepted_{0};
  std::atomic<int> served_{0};
  std::thread thread_;
};

// The name in the head's reply to one CallHead with `timeout`.
std::string CallForName(const std::string& address, std::chrono::milliseconds timeout) {
  auto reply = lumen::runtime::CallHead(
      address, [](lumen::proto::Envelope::Builder env) { env.setGetNodes(); }, timeout);
  REQUIRE(reply.ok());
  std::string name;
  REQUIRE(lumen::runtime::ReadReply(*reply, "the head", [&](lumen::proto::Envelope::Reader env) {
            name = env.getPlacementGroupState().getName().cStr();
            return absl::OkStatus();
          }).ok());
  return name;
}

int64_t ReceiveTimeoutMs(int fd) {
  timeval tv{};
  socklen_t len = sizeof(tv);
  REQUIRE(::getsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, &len) == 0);
  return static_cast<int64_t>(tv.tv_sec) * 1000 + tv.tv_usec / 1000;
}

}  // namespace

TEST_CASE("A pooled connection keeps the reply timeout its last call set, and a call with "
          "another one sets its own") {
  // CallHead sets SO_RCVTIMEO only when the pooled connection's differs
  // (one system call per call less): the timeout in force must still be the
  // caller's.
  HeadConnectionPool& pool = HeadConnectionPool::Instance();
  pool.Clear();
  ScriptedHead head("small", "");
  for (int64_t ms : {1500, 1500, 2700, 1500}) {
    CHECK(CallForName(head.address(), std::chrono::milliseconds(ms)) == "small");
    int64_t remembered = -1;
    int fd = pool.Take(head.address(), &remembered);
    REQUIRE(fd >= 0);
    CHECK(remembered == ms);
    CHECK(ReceiveTimeoutMs(fd) == ms);
    pool.Give(head.address(), fd, remembered);
  }
  CHECK(head.accepted() == 1);
  pool.Clear();
}

TEST_CASE("CallHead reads a reply longer than its first receive whole") {
  HeadConnectionPool::Instance().Clear();
  const std::string long_name(3 * 4096 + 13, 'x');
  ScriptedHead head(long_name, "");
  for (int i = 0; i < 3; ++i) {
    CHECK(CallForName(head.address(), std::chrono::seconds(5)) == long_name);
  }
  CHECK(head.accepted() == 1);
  HeadConnectionPool::Instance().Clear();
}

TEST_CASE("A connection on which the head sent bytes after its reply is not reused") {
  HeadConnectionPool::Instance().Clear();
  ScriptedHead head("small", std::string(8, '\0'));
  for (int i = 0; i < 3; ++i) {
    CHECK(CallForName(head.address(), std::chrono::seconds(5)) == "small");
  }
  CHECK(head.accepted() == 3);
  CHECK(HeadConnectionPool::Instance().IdleCount(head.address()) == 0);
  HeadConnectionPool::Instance().Clear();
}

TEST_CASE("A pooled local connection is handed out unpolled, and one the head closed is "
          "replaced when the request's write fails") {
  // Invariant: a Unix stream the head closed fails the next write (EPIPE)
  // with nothing delivered, so CallHead skips Take's poll for it and, when
  // the write fails, takes a new connection for the same request: every call
  // answered, each request served once.
  HeadConnectionPool& pool = HeadConnectionPool::Instance();
  pool.Clear();
  ScriptedHead head("local", "", /*local=*/true, /*close_after_reply=*/true);
  for (int i = 0; i < 5; ++i) {
    CHECK(CallForName(head.address(), std::chrono::seconds(5)) == "local");
    // Wait until the head's close is visible here, then give it back: the
    // next call gets it unpolled and must notice on its write.
    bool write_checks = false;
    int fd = pool.Take(head.address(), nullptr, &write_checks);
    REQUIRE(fd >= 0);
    CHECK(write_checks);
    pollfd p{.fd = fd, .events = POLLRDHUP, .revents = 0};
    REQUIRE(::poll(&p, 1, 5000) == 1);
    pool.Give(head.address(), fd, 5000, write_checks);
  }
  CHECK(head.accepted() == 5);
  CHECK(head.served() == 5);
  // A taker that cannot handle the failed write gets it polled: dropped.
  CHECK(pool.Take(head.address()) == -1);
  pool.Clear();
}
