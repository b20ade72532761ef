// HeadLocalPeerTrusted (lumen/common/head_local_socket.h): a client uses the
// head's abstract socket only when its listener runs as the client's user;
// abstract names have no permissions, so another user could hold the name.
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstddef>
#include <cstring>
#include <string>
#include <utility>

#include "lumen/common/head_local_socket.h"
#include "lumen/common/ids.h"

namespace {

// The socket address of the abstract name `name` (no leading NUL) and its length.
std::pair<sockaddr_un, socklen_t> AbstractAddress(const std::string& name) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path + 1, name.data(), name.size());
  return {addr, static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size())};
}

// Binds and listens on the abstract name `name`; returns the fd, or -1.
int ListenAbstract(const std::string& name) {
  auto [addr, len] = AbstractAddress(name);
  int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0 || ::listen(fd, 4) != 0) {
    return -1;
  }
  return fd;
}

// A connection to the abstract name `name`; the fd, or -1.
int ConnectAbstract(const std::string& name) {
  auto [addr, len] = AbstractAddress(name);
  int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0) return -1;
  return fd;
}

}  // namespace

TEST_CASE("a head local socket is trusted only when its listener runs as this user") {
  const std::string name = "lumen-test-peer-" + lumen::WorkerId::Random().Hex().substr(0, 16);
  {
    int listener = ListenAbstract(name);
    REQUIRE(listener >= 0);
    int fd = ConnectAbstract(name);
    REQUIRE(fd >= 0);
    CHECK(lumen::HeadLocalPeerTrusted(fd));
    ::close(fd);
    ::close(listener);
  }
  CHECK_FALSE(lumen::HeadLocalPeerTrusted(-1));
  if (::geteuid() != 0) {
    WARN("not root: cannot listen as another user; the other-user case is not run");
    return;
  }
  // A listener of another user (nobody) holding the name: not trusted.
  int ready[2];
  REQUIRE(::pipe(ready) == 0);
  pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    if (::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(2);
    int listener = ListenAbstract(name);
    char ok = listener >= 0 ? 'y' : 'n';
    if (::write(ready[1], &ok, 1) != 1) ::_exit(3);
    ::pause();
    ::_exit(0);
  }
  ::close(ready[1]);
  char ok = 0;
  REQUIRE(::read(ready[0], &ok, 1) == 1);
  ::close(ready[0]);
  CHECK(ok == 'y');
  int fd = ConnectAbstract(name);
  CHECK(fd >= 0);
  CHECK_FALSE(lumen::HeadLocalPeerTrusted(fd));
  if (fd >= 0) ::close(fd);
  ::kill(child, SIGKILL);
  int status = 0;
  ::waitpid(child, &status, 0);
}
