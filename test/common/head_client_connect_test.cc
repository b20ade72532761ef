// CallHead's connect is bounded by the call's deadline: a head that accepts no
// connection (here a listener whose backlog is full and that never accepts)
// fails the call with DeadlineExceeded, naming the address and the limit,
// within that deadline; over TCP and over the head's local Unix socket.
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

#include "lumen/common/head_client.h"
#include "lumen/common/head_local_socket.h"

#include <catch2/catch.hpp>

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Closes the descriptors it holds when the test ends.
struct Fds {
  std::vector<int> fds;
  ~Fds() {
    for (int fd : fds) ::close(fd);
  }
  int Add(int fd) {
    fds.push_back(fd);
    return fd;
  }
};

// A TCP listener on 127.0.0.1 with a backlog of 0 that never accepts; sets
// `*address` to "127.0.0.1:PORT".
int ListenWithoutAccepting(Fds& fds, std::string* address) {
  int fd = fds.Add(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  REQUIRE(::listen(fd, 0) == 0);
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  *address = "127.0.0.1:" + std::to_string(ntohs(addr.sin_port));
  return fd;
}

// Connects to the listener at `addr` until a connect no longer completes
// (the backlog is full: the kernel drops the SYN, or answers EAGAIN on a Unix
// socket). The connections made stay open in `fds`.
void FillBacklog(Fds& fds, int family, const sockaddr* addr, socklen_t len) {
  for (int i = 0; i < 64; ++i) {
    int fd = fds.Add(::socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (::connect(fd, addr, len) == 0) continue;
    if (errno == EAGAIN) return;  // Unix: full
    REQUIRE(errno == EINPROGRESS);
    pollfd p{fd, POLLOUT, 0};
    if (::poll(&p, 1, 300) == 0) return;  // TCP: the SYN was dropped, full
  }
  FAIL("the listener's backlog never filled");
}

void RequireDeadlineWithin(const std::string& head, milliseconds deadline) {
  const auto start = Clock::now();
  auto reply = lumen::runtime::CallHead(
      head, [](lumen::proto::Envelope::Builder env) { env.setGetNodes(); }, deadline);
  const auto took = std::chrono::duration_cast<milliseconds>(Clock::now() - start);
  INFO("status: " << reply.status() << ", took " << took.count() << " ms");
  REQUIRE(absl::IsDeadlineExceeded(reply.status()));
  const std::string message(reply.status().message());
  CHECK(message.find(head) != std::string::npos);
  CHECK(message.find(std::to_string(deadline.count()) + " ms") != std::string::npos);
  // It waited for the connect (not refused at once), and no longer than the
  // deadline (plus room for a loaded machine).
  CHECK(took >= deadline - milliseconds(50));
  CHECK(took < deadline + milliseconds(2000));
}

}  // namespace

TEST_CASE("CallHead to a TCP listener with a full backlog ends at its deadline",
          "[head_client]") {
  Fds fds;
  std::string head;
  ListenWithoutAccepting(fds, &head);
  sockaddr_in addr{};
  socklen_t len = sizeof(addr);
  ::getsockname(fds.fds[0], reinterpret_cast<sockaddr*>(&addr), &len);
  FillBacklog(fds, AF_INET, reinterpret_cast<sockaddr*>(&addr), len);
  // No local socket answers for this address ("@lumen-head-127.0.0.1:PORT"
  // is not bound): the call goes over TCP.
  RequireDeadlineWithin(head, milliseconds(500));
}

TEST_CASE("CallHead to a local head socket with a full backlog ends at its deadline",
          "[head_client]") {
  Fds fds;
  std::string head;
  ListenWithoutAccepting(fds, &head);  // a port no one else uses: a unique name
  const std::string name = lumen::HeadLocalSocketName(head);
  REQUIRE(!name.empty());
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, name.data(), name.size());
  addr.sun_path[0] = '\0';  // abstract
  const auto len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + name.size());
  int listener = fds.Add(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  REQUIRE(::bind(listener, reinterpret_cast<sockaddr*>(&addr), len) == 0);
  REQUIRE(::listen(listener, 0) == 0);
  FillBacklog(fds, AF_UNIX, reinterpret_cast<sockaddr*>(&addr), len);
  RequireDeadlineWithin(head, milliseconds(500));
}
