// libFuzzer target: the head's message decode + dispatch, the widest real
// entry point that runs in-process. Each input is the byte stream one client
// sends on one connection; it goes through a Unix socketpair into a real head
// service (lumen::head::ServeConnectionForTesting: the head's own Connection
// reader with its hello-phase and frame limits, its hello/token admission and
// its dispatch to the node table, jobs, key-value store, named actors and
// placement groups), which serves it until the stream ends and the head has
// closed the connection. Only the listener, the health-check timer and the
// HTTP server are left out.
//
// The first input byte chooses how the stream starts: bit 0 set, the harness
// sends a valid hello first (so that mutations reach the dispatch at once);
// the rest of the input follows. Replies are read and dropped.
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "lumen/common/connection.h"
#include "lumen/common/head_client.h"
#include "lumen/head/head_service.h"

namespace {

std::string Hello() {
  lumen::OutMessage out;
  lumen::runtime::InitHello(out.Init(), lumen::proto::Role::DRIVER);
  std::string frame;
  lumen::AppendFrame(out.builder(), &frame);
  return frame;
}

// Blocking: the socket's buffer (about 200 KiB) holds more than scripts/fuzz's
// -max_len, so the whole input fits before the head reads any of it.
void WriteAll(int fd, const uint8_t* data, size_t size) {
  while (size > 0) {
    ssize_t n = ::send(fd, data, size, MSG_NOSIGNAL);
    if (n <= 0) return;
    data += n;
    size -= static_cast<size_t>(n);
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // Quiet: a refused peer is logged as a warning, thousands of times a second.
  ::setenv("LUMEN_LOG_LEVEL", "error", 1);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  static const std::string hello = Hello();
  static const lumen::head::HeadOptions options = [] {
    lumen::head::HeadOptions o;
    o.metrics_port = -1;
    return o;
  }();
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) std::abort();
  int buffer = 4 << 20;
  ::setsockopt(fds[0], SOL_SOCKET, SO_SNDBUF, &buffer, sizeof(buffer));
  ::setsockopt(fds[1], SOL_SOCKET, SO_RCVBUF, &buffer, sizeof(buffer));
  ::setsockopt(fds[1], SOL_SOCKET, SO_SNDBUF, &buffer, sizeof(buffer));
  ::setsockopt(fds[0], SOL_SOCKET, SO_RCVBUF, &buffer, sizeof(buffer));
  if (data[0] & 1) WriteAll(fds[0], reinterpret_cast<const uint8_t*>(hello.data()), hello.size());
  WriteAll(fds[0], data + 1, size - 1);
  // The end of the stream: the head sees EOF after the input and closes.
  ::shutdown(fds[0], SHUT_WR);
  lumen::head::ServeConnectionForTesting(options, fds[1]);
  ::close(fds[0]);
  return 0;
}
