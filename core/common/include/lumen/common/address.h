// Where a process listens, and how another process reaches it.
//
// An address is "host:port" (TCP), "/path" (a Unix socket), or both joined as
// "host:port;/path". Processes of one node share a session directory and talk
// over the Unix socket (cheaper); processes of other nodes use TCP. The address
// string is also the identity peers key their connections by.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <string_view>

#include <boost/asio.hpp>

#include "absl/status/statusor.h"
#include "lumen/common/connection.h"

namespace lumen {

struct Endpoint {
  std::string tcp;        // "host:port", or empty
  std::string unix_path;  // or empty
};

Endpoint ParseAddress(std::string_view address);
std::string FormatAddress(const Endpoint& endpoint);

// Connects (blocking) to `address`: over its Unix socket when the socket lies
// under `local_session_dir` (the caller's own node) or there is no TCP part,
// else over TCP (with TCP_NODELAY), giving up on a host that does not answer
// within Timeouts::connect_timeout (LUMEN_CONNECT_TIMEOUT_MS). Blocking, also
// its name resolution: not for an event loop that must not wait.
absl::StatusOr<Socket> ConnectToAddress(boost::asio::io_context& io, const std::string& address,
                                        const std::string& local_session_dir);

// Connects to `address` like ConnectToAddress, without blocking the loop:
// name resolution and the connect run asynchronously on `io`, and a peer that
// has not answered within `timeout` fails with DeadlineExceeded. `done` runs
// exactly once, on `io`'s thread (never inside this call).
using ConnectCallback = std::function<void(absl::StatusOr<Socket>)>;
void AsyncConnectToAddress(boost::asio::io_context& io, const std::string& address,
                           const std::string& local_session_dir, std::chrono::milliseconds timeout,
                           ConnectCallback done);

// A TCP acceptor on `host`, port `port` (0: any free port).
absl::StatusOr<std::unique_ptr<boost::asio::ip::tcp::acceptor>> ListenTcp(
    boost::asio::io_context& io, const std::string& host, int port);

// Wraps an accepted TCP socket as a generic one (TCP_NODELAY set).
Socket AdoptTcp(boost::asio::io_context& io, boost::asio::ip::tcp::socket socket);

// True for "localhost", 127.0.0.0/8 and ::1.
bool IsLoopbackHost(const std::string& host);

}  // namespace lumen
