// Tests of lumen::AsyncConnectToAddress (lumen/common/address.h): it connects
// over Unix sockets and TCP without blocking the loop, reports refusals and bad
// addresses as errors, and gives up on a silent peer at its deadline.
//
// Each test runs an io_context on the test thread until the callback has run.
#include "lumen/common/address.h"
#include "lumen/common/unix_endpoint.h"

#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <optional>
#include <string>

#include <boost/asio.hpp>
#include <catch2/catch.hpp>

namespace {

namespace asio = boost::asio;
using std::chrono::milliseconds;

// Runs `io` until `result` is set (the callback ran) or 10 s pass.
absl::StatusOr<lumen::Socket> ConnectAndWait(asio::io_context& io, const std::string& address,
                                             milliseconds timeout, bool* ran_inline = nullptr) {
  std::optional<absl::StatusOr<lumen::Socket>> result;
  lumen::AsyncConnectToAddress(io, address, "", timeout,
                               [&](absl::StatusOr<lumen::Socket> socket) { result = std::move(socket); });
  if (ran_inline) *ran_inline = result.has_value();
  io.restart();
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!result && std::chrono::steady_clock::now() < until) io.run_one_for(milliseconds(100));
  REQUIRE(result.has_value());
  return std::move(*result);
}

TEST_CASE("AsyncConnectToAddress reaches a TCP listener and never calls back inline", "[address]") {
  asio::io_context io;
  auto acceptor = lumen::ListenTcp(io, "127.0.0.1", 0);
  REQUIRE(acceptor.ok());
  int port = (*acceptor)->local_endpoint().port();
  bool ran_inline = true;
  auto socket = ConnectAndWait(io, "127.0.0.1:" + std::to_string(port), milliseconds(5000), &ran_inline);
  CHECK_FALSE(ran_inline);
  REQUIRE(socket.ok());
  CHECK(socket->is_open());
}

TEST_CASE("AsyncConnectToAddress reaches a Unix socket", "[address]") {
  asio::io_context io;
  char dir_template[] = "/tmp/lumen-address-test-XXXXXX";
  REQUIRE(::mkdtemp(dir_template) != nullptr);
  std::string path = std::string(dir_template) + "/s";
  {
    asio::local::stream_protocol::acceptor acceptor(io, asio::local::stream_protocol::endpoint(path));
    auto socket = ConnectAndWait(io, path, milliseconds(5000));
    REQUIRE(socket.ok());
    CHECK(socket->is_open());
  }
  ::unlink(path.c_str());
  ::rmdir(dir_template);
}

TEST_CASE("an abstract Unix address is parsed, counted as this session's and reached, with no file",
          "[address]") {
  // Invariant: "host:port;@/dir/s" parses to its TCP part and the abstract
  // name "@/dir/s", which counts as under session dir /dir (not under
  // /di or another dir); a listener bound to UnixEndpoint("@...") is reached
  // by both connect functions over Unix (the TCP part names a port nobody
  // listens on) and leaves no file at /dir/s.
  const std::string dir = "/tmp/lumen-address-test-abstract-" + std::to_string(::getpid());
  const std::string name = "@" + dir + "/s";
  lumen::Endpoint parsed = lumen::ParseAddress("127.0.0.1:1;" + name);
  CHECK(parsed.tcp == "127.0.0.1:1");
  CHECK(parsed.unix_path == name);
  CHECK(lumen::FormatAddress(parsed) == "127.0.0.1:1;" + name);
  CHECK(lumen::InSessionDir(name, dir));
  CHECK(lumen::InSessionDir(dir + "/s", dir));
  CHECK_FALSE(lumen::InSessionDir(name, dir.substr(0, dir.size() - 1)));
  CHECK_FALSE(lumen::InSessionDir(name, "/elsewhere"));
  asio::io_context io;
  asio::local::stream_protocol::acceptor acceptor(io, lumen::UnixEndpoint(name));
  CHECK(::access((dir + "/s").c_str(), F_OK) != 0);
  std::optional<absl::StatusOr<lumen::Socket>> result;
  lumen::AsyncConnectToAddress(io, FormatAddress(parsed), dir, milliseconds(5000),
                               [&](absl::StatusOr<lumen::Socket> socket) { result = std::move(socket); });
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!result && std::chrono::steady_clock::now() < until) io.run_one_for(milliseconds(100));
  REQUIRE(result.has_value());
  INFO("async: " << result->status());
  CHECK(result->ok());
  auto blocking = lumen::ConnectToAddress(io, FormatAddress(parsed), dir);
  INFO("blocking: " << blocking.status());
  CHECK(blocking.ok());
}

TEST_CASE("AsyncConnectToAddress reports a refused connect and a bad address", "[address]") {
  asio::io_context io;
  // A port that was free a moment ago: nothing listens there.
  int port = 0;
  {
    auto acceptor = lumen::ListenTcp(io, "127.0.0.1", 0);
    REQUIRE(acceptor.ok());
    port = (*acceptor)->local_endpoint().port();
  }
  auto refused = ConnectAndWait(io, "127.0.0.1:" + std::to_string(port), milliseconds(5000));
  REQUIRE_FALSE(refused.ok());
  CHECK(absl::IsUnavailable(refused.status()));
  CHECK_THAT(std::string(refused.status().message()), Catch::Contains("cannot reach 127.0.0.1"));

  auto bad = ConnectAndWait(io, "no-port-here", milliseconds(5000));
  REQUIRE_FALSE(bad.ok());
  CHECK(absl::IsInvalidArgument(bad.status()));
}

TEST_CASE("AsyncConnectToAddress gives up on a peer that does not accept, at its deadline", "[address]") {
  asio::io_context io;
  // A listener with a backlog of 0 that never accepts: after the first queued
  // connection, the kernel drops SYNs, so a connect neither succeeds nor fails.
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  REQUIRE(::listen(fd, 0) == 0);
  socklen_t len = sizeof addr;
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  std::string address = "127.0.0.1:" + std::to_string(ntohs(addr.sin_port));
  // Fill the accept queue.
  std::vector<absl::StatusOr<lumen::Socket>> fillers;
  absl::Status last_status;
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 8; ++i) {
    auto socket = ConnectAndWait(io, address, milliseconds(300));
    if (!socket.ok()) {
      last_status = socket.status();
      break;
    }
    fillers.push_back(std::move(socket));
  }
  auto elapsed = std::chrono::steady_clock::now() - start;
  ::close(fd);
  // The queue is full after a few: a later connect timed out (not refused),
  // and not long after its 300 ms deadline.
  REQUIRE_FALSE(last_status.ok());
  CHECK(absl::IsDeadlineExceeded(last_status));
  CHECK_THAT(std::string(last_status.message()), Catch::Contains("no answer within 300 ms"));
  CHECK(elapsed < std::chrono::seconds(5));
}

}  // namespace
