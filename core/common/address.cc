#include "lumen/common/address.h"
#include "lumen/common/unix_endpoint.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "lumen/common/post.h"
#include "lumen/common/process.h"
#include "lumen/common/timeouts.h"

namespace lumen {

namespace asio = boost::asio;

namespace {

// Timeouts::connect_timeout (LUMEN_CONNECT_TIMEOUT_MS), read once per process.
int ConnectTimeoutMs() {
  static const int timeout_ms =
      static_cast<int>(std::max<int64_t>(1, Timeouts::FromEnv().connect_timeout.count()));
  return timeout_ms;
}

}  // namespace

asio::local::stream_protocol::endpoint UnixEndpoint(const std::string& unix_path) {
  if (!unix_path.empty() && unix_path.front() == '@') {
    std::string name = unix_path;
    name.front() = '\0';
    return asio::local::stream_protocol::endpoint(name);
  }
  return asio::local::stream_protocol::endpoint(unix_path);
}

bool InSessionDir(const std::string& unix_path, const std::string& session_dir) {
  if (unix_path.empty() || session_dir.empty()) return false;
  std::string_view path = unix_path;
  if (path.front() == '@') path.remove_prefix(1);
  return path.substr(0, session_dir.size() + 1) == session_dir + "/";
}

Endpoint ParseAddress(std::string_view address) {
  Endpoint out;
  std::string_view rest = address;
  while (!rest.empty()) {
    size_t semi = rest.find(';');
    std::string_view part = rest.substr(0, semi);
    if (!part.empty()) {
      if (part.front() == '/' || part.front() == '@') {
        out.unix_path = std::string(part);
      } else {
        out.tcp = std::string(part);
      }
    }
    if (semi == std::string_view::npos) break;
    rest.remove_prefix(semi + 1);
  }
  return out;
}

std::string FormatAddress(const Endpoint& endpoint) {
  if (endpoint.tcp.empty()) return endpoint.unix_path;
  if (endpoint.unix_path.empty()) return endpoint.tcp;
  return absl::StrCat(endpoint.tcp, ";", endpoint.unix_path);
}

Socket AdoptTcp(asio::io_context& io, asio::ip::tcp::socket socket) {
  boost::system::error_code ignored;
  socket.set_option(asio::ip::tcp::no_delay(true), ignored);
  auto protocol = socket.local_endpoint(ignored).protocol();
  int fd = socket.release();
  return Socket(io, asio::generic::stream_protocol(protocol.family(), protocol.protocol()), fd);
}

absl::StatusOr<Socket> ConnectToAddress(asio::io_context& io, const std::string& address,
                                        const std::string& local_session_dir) {
  Endpoint endpoint = ParseAddress(address);
  bool same_node = InSessionDir(endpoint.unix_path, local_session_dir);
  boost::system::error_code ec;
  if (!endpoint.unix_path.empty() && (same_node || endpoint.tcp.empty())) {
    asio::local::stream_protocol::socket s(io);
    s.connect(UnixEndpoint(endpoint.unix_path), ec);
    if (ec) {
      return absl::UnavailableError(
          absl::StrCat("cannot reach ", endpoint.unix_path, ": ", ec.message()));
    }
    int fd = s.release();
    return Socket(io, asio::generic::stream_protocol(AF_UNIX, 0), fd);
  }
  if (endpoint.tcp.empty()) return absl::InvalidArgumentError(absl::StrCat("bad address '", address, "'"));
  auto colon = endpoint.tcp.rfind(':');
  if (colon == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("bad address '", address, "' (want host:port)"));
  }
  asio::ip::tcp::resolver resolver(io);
  auto results = resolver.resolve(endpoint.tcp.substr(0, colon), endpoint.tcp.substr(colon + 1), ec);
  if (ec) return absl::UnavailableError(absl::StrCat("cannot reach ", endpoint.tcp, ": ", ec.message()));
  // Bounded: an unreachable host (no RST, no route) must not stall the
  // caller's event loop for the kernel's minutes-long SYN timeout.
  for (const auto& candidate : results) {
    asio::ip::tcp::socket s(io);
    s.open(candidate.endpoint().protocol(), ec);
    if (ec) continue;
    s.non_blocking(true, ec);
    s.connect(candidate.endpoint(), ec);
    if (ec == asio::error::would_block || ec == asio::error::in_progress) {
      pollfd p{s.native_handle(), POLLOUT, 0};
      int ready = ::poll(&p, 1, ConnectTimeoutMs());
      if (ready <= 0) {
        ec = asio::error::timed_out;
        continue;
      }
      int error = 0;
      socklen_t len = sizeof(error);
      ::getsockopt(s.native_handle(), SOL_SOCKET, SO_ERROR, &error, &len);
      ec = boost::system::error_code(error, boost::system::system_category());
    }
    if (ec) continue;
    s.non_blocking(false, ec);
    return AdoptTcp(io, std::move(s));
  }
  return absl::UnavailableError(absl::StrCat("cannot reach ", endpoint.tcp, ": ", ec.message()));
}

absl::StatusOr<std::unique_ptr<asio::ip::tcp::acceptor>> ListenTcp(asio::io_context& io,
                                                                   const std::string& host,
                                                                   int port) {
  boost::system::error_code ec;
  asio::ip::tcp::endpoint endpoint(asio::ip::make_address(host, ec), static_cast<uint16_t>(port));
  auto acceptor = std::make_unique<asio::ip::tcp::acceptor>(io);
  if (!ec) acceptor->open(endpoint.protocol(), ec);
  if (!ec) SetCloseOnExec(acceptor->native_handle());
  if (!ec && port != 0) acceptor->set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor->bind(endpoint, ec);
  if (!ec) acceptor->listen(512, ec);
  if (ec) return absl::UnavailableError(absl::StrCat("cannot listen on ", host, ":", port, ": ", ec.message()));
  return acceptor;
}

bool IsLoopbackHost(const std::string& host) {
  if (host == "localhost" || host == "::1") return true;
  boost::system::error_code ec;
  auto address = asio::ip::make_address(host, ec);
  return !ec && address.is_loopback();
}

}  // namespace lumen

namespace lumen {

namespace {

// One asynchronous connect: the socket being connected, its resolver and its
// deadline. Owned by the handlers in flight (shared_ptr); io thread only.
struct PendingConnect {
  PendingConnect(asio::io_context& io, ConnectCallback callback)
      : io(io), resolver(io), tcp_socket(io), unix_socket(io), deadline(io), done(std::move(callback)) {}

  // Runs `done` once; later calls (the deadline after a connect, or the
  // reverse) do nothing.
  void Finish(absl::StatusOr<Socket> result) {
    if (!done) return;
    deadline.cancel();
    auto callback = std::move(done);
    done = nullptr;
    callback(std::move(result));
  }

  asio::io_context& io;
  asio::ip::tcp::resolver resolver;
  asio::ip::tcp::socket tcp_socket;
  asio::local::stream_protocol::socket unix_socket;
  asio::steady_timer deadline;
  std::string target;  // for messages
  ConnectCallback done;
};

}  // namespace

namespace {
// Why a connect failed: ResourceExhausted when this process is out of file
// descriptors (the peer is fine; retrying elsewhere will not help),
// Unavailable otherwise.
absl::Status ConnectFailure(const std::string& target, const boost::system::error_code& ec) {
  if (ec == boost::system::errc::too_many_files_open ||
      ec == boost::system::errc::too_many_files_open_in_system) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "cannot reach ", target, ": ", ec.message(),
        " (this process is out of file descriptors: raise `ulimit -n`, or hold fewer "
        "connections, e.g. fewer actor handles: each costs its owner two)"));
  }
  return absl::UnavailableError(absl::StrCat("cannot reach ", target, ": ", ec.message()));
}
}  // namespace

void AsyncConnectToAddress(asio::io_context& io, const std::string& address,
                           const std::string& local_session_dir, std::chrono::milliseconds timeout,
                           ConnectCallback done) {
  auto pending = std::make_shared<PendingConnect>(io, std::move(done));
  auto fail_later = [&io, pending](absl::Status status) {
    lumen::Post(io, "connect.fail", [pending, status = std::move(status)] { pending->Finish(status); });
  };
  Endpoint endpoint = ParseAddress(address);
  bool same_node = InSessionDir(endpoint.unix_path, local_session_dir);
  bool use_unix = !endpoint.unix_path.empty() && (same_node || endpoint.tcp.empty());
  size_t colon = endpoint.tcp.rfind(':');
  if (!use_unix && (endpoint.tcp.empty() || colon == std::string::npos)) {
    fail_later(absl::InvalidArgumentError(absl::StrCat("bad address '", address, "' (want host:port or /path)")));
    return;
  }
  pending->target = use_unix ? endpoint.unix_path : endpoint.tcp;
  pending->deadline.expires_after(timeout);
  pending->deadline.async_wait([pending, timeout](const boost::system::error_code& ec) {
    if (ec) return;  // cancelled: the connect finished first
    boost::system::error_code ignored;
    pending->resolver.cancel();
    pending->tcp_socket.close(ignored);
    pending->unix_socket.close(ignored);
    pending->Finish(absl::DeadlineExceededError(absl::StrCat(
        "cannot reach ", pending->target, ": no answer within ", timeout.count(), " ms")));
  });

  if (use_unix) {
    pending->unix_socket.async_connect(
        UnixEndpoint(endpoint.unix_path),
        [pending](const boost::system::error_code& ec) {
          if (!pending->done) return;
          if (ec) {
            pending->Finish(ConnectFailure(pending->target, ec));
            return;
          }
          int fd = pending->unix_socket.release();
          pending->Finish(Socket(pending->io, asio::generic::stream_protocol(AF_UNIX, 0), fd));
        });
    return;
  }
  pending->resolver.async_resolve(
      endpoint.tcp.substr(0, colon), endpoint.tcp.substr(colon + 1),
      [pending](const boost::system::error_code& ec, asio::ip::tcp::resolver::results_type results) {
        if (!pending->done) return;
        if (ec) {
          pending->Finish(ConnectFailure(pending->target, ec));
          return;
        }
        asio::async_connect(pending->tcp_socket, results,
                            [pending](const boost::system::error_code& ec, const asio::ip::tcp::endpoint&) {
                              if (!pending->done) return;
                              if (ec) {
                                pending->Finish(ConnectFailure(pending->target, ec));
                                return;
                              }
                              pending->Finish(AdoptTcp(pending->io, std::move(pending->tcp_socket)));
                            });
      });
}

}  // namespace lumen
