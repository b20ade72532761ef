#include "lumen/common/head_client.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <boost/asio.hpp>
#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "lumen/common/backoff.h"
#include "lumen/common/process.h"
#include "lumen/common/connection.h"
#include "lumen/common/control_retry.h"
#include "lumen/common/fault_injector.h"
#include "lumen/common/head_connection_pool.h"
#include "lumen/common/head_local_socket.h"
#include "lumen/common/process.h"
#include "lumen/common/proto_util.h"
#include "lumen/common/task_event_wire.h"

namespace lumen::runtime {
namespace {
NodeView ToNodeView(proto::NodeStats::Reader n);
}  // namespace

absl::StatusOr<std::string> ResolveHeadAddress(const std::string& address) {
  if (!address.empty() && address != "auto") return address;
  // The newest session started by `lumen start --head` whose head is alive.
  std::filesystem::file_time_type newest;
  std::string found, found_token;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(TempRoot(), ec)) {
    if (entry.path().filename().string().rfind("lumen-session-", 0) != 0) continue;
    auto file = entry.path() / "head_address";
    if (!std::filesystem::exists(file, ec)) continue;
    if (!std::filesystem::exists(entry.path() / "head_node", ec)) continue;  // a joined node
    // Skip a session whose head (the first pid listed) is gone.
    std::ifstream pids(entry.path() / "cluster.pids");
    pid_t head_pid = 0;
    if (!(pids >> head_pid) || !ProcessAlive(head_pid)) continue;
    auto t = std::filesystem::last_write_time(file, ec);
    if (found.empty() || t > newest) {
      std::ifstream in(file);
      std::string line;
      if (std::getline(in, line) && !line.empty()) {
        found = line;
        found_token.clear();
        std::ifstream token(entry.path() / "token");
        std::getline(token, found_token);
        newest = t;
      }
    }
  }
  if (found.empty()) {
    return absl::NotFoundError("no running cluster found (start one with `lumen start --head`)");
  }
  if (!found_token.empty() && HeadToken().empty()) SetHeadToken(found_token);
  return found;
}

namespace {
absl::Mutex token_mu;
std::string* head_token ABSL_GUARDED_BY(token_mu) = nullptr;
}  // namespace

void SetHeadToken(std::string token) {
  absl::MutexLock lock(&token_mu);
  if (head_token == nullptr) head_token = new std::string();
  *head_token = std::move(token);
}

std::string HeadToken() {
  absl::MutexLock lock(&token_mu);
  if (head_token == nullptr) {
    const char* env = std::getenv("LUMEN_TOKEN");
    head_token = new std::string(env ? env : "");
  }
  return *head_token;
}

proto::Hello::Builder InitHello(proto::Envelope::Builder env, proto::Role role) {
  auto hello = env.initHello();
  hello.setProtocolVersion(proto::PROTOCOL_VERSION);
  hello.setRole(role);
  hello.setPid(::getpid());
  hello.setToken(HeadToken());
  return hello;
}

namespace {

using Clock = std::chrono::steady_clock;

// Milliseconds from now to `deadline`, at least 1 (0 would mean "no limit" to
// SO_SNDTIMEO, "return at once" to poll).
int64_t MsLeft(Clock::time_point deadline) {
  auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
  return std::max<int64_t>(1, left.count());
}

timeval TimevalOf(int64_t ms) {
  return timeval{static_cast<time_t>(ms / 1000), static_cast<suseconds_t>((ms % 1000) * 1000)};
}

absl::Status ConnectDeadlineError(const std::string& target, std::chrono::milliseconds limit) {
  return absl::DeadlineExceededError(absl::StrCat(
      "cannot reach ", target, ": no connection within ", limit.count(),
      " ms (LUMEN_CONNECT_TIMEOUT_MS, or the call's deadline if shorter)"));
}

// A connection (close on exec) to the Unix socket `path` ('@': abstract, as
// UnixEndpoint writes it) by `deadline`. A Unix connect never answers
// EINPROGRESS: a non-blocking one to a listener whose backlog is full fails at
// once with EAGAIN, with nothing to poll for. So this one blocks, bounded by
// SO_SNDTIMEO (the kernel's wait for room in the backlog ends there with
// EAGAIN): DeadlineExceeded naming `target` and `limit` then; Unavailable when
// nothing listens there.
absl::StatusOr<int> ConnectUnixBounded(const std::string& path, Clock::time_point deadline,
                                       const std::string& target,
                                       std::chrono::milliseconds limit) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const bool abstract = !path.empty() && path.front() == '@';
  if (path.empty() || path.size() + (abstract ? 0 : 1) > sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat("bad Unix socket path '", path, "'"));
  }
  std::memcpy(addr.sun_path, path.data(), path.size());
  if (abstract) addr.sun_path[0] = '\0';
  const auto len =
      static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + path.size() + (abstract ? 0 : 1));
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("socket: ", std::strerror(errno)));
  for (;;) {
    const timeval left = TimevalOf(MsLeft(deadline));
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &left, sizeof(left));
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), len) == 0) return fd;
    const int error = errno;
    if (error == EINTR && Clock::now() < deadline) continue;
    ::close(fd);
    if (error == EAGAIN || error == EWOULDBLOCK || error == EINTR) {
      return ConnectDeadlineError(target, limit);
    }
    return absl::UnavailableError(
        absl::StrCat("cannot reach ", target, ": ", std::strerror(error)));
  }
}

// A TCP connection (close on exec, blocking once connected) to `host_port` by
// `deadline`: a non-blocking connect, then poll() for it until the deadline
// (DeadlineExceeded naming `target` and `limit`). Each address the name
// resolves to is tried in turn, within the same deadline. The name is
// resolved with getaddrinfo, which is not bounded (a numeric address, as
// clusters use, resolves at once).
absl::StatusOr<int> ConnectTcpBounded(const std::string& host_port, Clock::time_point deadline,
                                      const std::string& target,
                                      std::chrono::milliseconds limit) {
  auto colon = host_port.rfind(':');
  if (colon == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("bad address '", host_port, "' (want host:port)"));
  }
  boost::asio::io_context io;
  boost::asio::ip::tcp::resolver resolver(io);
  boost::system::error_code ec;
  auto endpoints = resolver.resolve(host_port.substr(0, colon), host_port.substr(colon + 1), ec);
  if (ec) return absl::UnavailableError(absl::StrCat("cannot reach ", target, ": ", ec.message()));
  absl::Status last = absl::UnavailableError(absl::StrCat("cannot reach ", target, ": no address"));
  for (const auto& entry : endpoints) {
    if (Clock::now() >= deadline) return ConnectDeadlineError(target, limit);
    const auto endpoint = entry.endpoint();
    int fd = ::socket(endpoint.protocol().family(), SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
      last = absl::UnavailableError(absl::StrCat("socket: ", std::strerror(errno)));
      continue;
    }
    int error = 0;
    if (::connect(fd, endpoint.data(), static_cast<socklen_t>(endpoint.size())) != 0) {
      error = errno;
      if (error == EINPROGRESS || error == EINTR) {
        pollfd p{fd, POLLOUT, 0};
        int ready;
        do {
          ready = ::poll(&p, 1, static_cast<int>(MsLeft(deadline)));
        } while ((ready < 0 && errno == EINTR) || (ready == 0 && Clock::now() < deadline));
        if (ready <= 0) {
          ::close(fd);
          return ConnectDeadlineError(target, limit);
        }
        socklen_t size = sizeof(error);
        if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &size) != 0) error = errno;
      }
    }
    if (error != 0) {
      ::close(fd);
      last = absl::UnavailableError(absl::StrCat("cannot reach ", target, ": ", std::strerror(error)));
      continue;
    }
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);  // blocking, with SO_*TIMEO
    return fd;
  }
  return last;
}

// A new connection to the head, hello sent: a blocking descriptor (close on
// exec, SO_SNDTIMEO `send_limit`) that the caller owns. Over the head's local
// socket when it has one for this address (lumen/common/head_local_socket.h;
// `*local` says so), else over TCP; either connect is bounded by
// `connect_limit` from now.
absl::StatusOr<int> ConnectToHead(const std::string& head_address,
                                  std::chrono::milliseconds connect_limit,
                                  std::chrono::milliseconds send_limit, bool* local = nullptr) {
  const auto deadline = Clock::now() + connect_limit;
  const std::string target = absl::StrCat("the head at ", head_address);
  int fd = -1;
  if (std::string name = HeadLocalSocketToTry(head_address); !name.empty()) {
    auto connected = ConnectUnixBounded(name, deadline, target, connect_limit);
    // A head whose local socket does not answer in time would not over TCP
    // either: the deadline is the call's. Any other failure (no such socket,
    // an older head): TCP.
    if (absl::IsDeadlineExceeded(connected.status())) return connected.status();
    if (connected.ok()) {
      fd = *connected;
      // Only a head of our own user: another may have taken the name first.
      if (!HeadLocalPeerTrusted(fd)) {
        ::close(fd);
        fd = -1;
      }
    }
  }
  if (local != nullptr) *local = fd >= 0;
  if (fd < 0) {
    auto connected = ConnectTcpBounded(head_address, deadline, target, connect_limit);
    if (!connected.ok()) return connected.status();
    fd = *connected;
  }
  // A head that stops reading must not freeze the caller.
  const timeval send_timeout = TimevalOf(std::max<int64_t>(1, send_limit.count()));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &send_timeout, sizeof(send_timeout));
  OutMessage out;
  InitHello(out.Init(), proto::Role::CLI);
  if (auto s = WriteFrameBlocking(fd, out.builder()); !s.ok()) {
    ::close(fd);
    return s;
  }
  return fd;
}

// As ReadFrameBlocking, for a pooled head connection: the head sends the one
// reply to the one request in flight and nothing after it, so the header and a
// payload of up to kReplyReadAheadBytes come in one receive, not two.
// `*extra` says whether bytes followed the reply (the connection is then not
// reusable; the old two-receive read left them for the next Take to find).
constexpr size_t kReplyReadAheadBytes = 4096;
absl::Status ReadReplyBlocking(int fd, size_t max_frame_bytes, std::vector<capnp::word>* words,
                               bool* extra) {
  *extra = false;
  alignas(capnp::word) char buffer[kFrameHeaderBytes + kReplyReadAheadBytes];
  size_t got = 0;
  while (got < kFrameHeaderBytes) {
    ssize_t n = ::recv(fd, buffer + got, sizeof(buffer) - got, 0);
    if (n == 0) return absl::UnavailableError("connection closed by peer");
    if (n < 0) {
      if (errno == EINTR) continue;
      // A blocking descriptor with SO_RCVTIMEO: the reply did not come in time.
      if (errno == EAGAIN || errno == EWOULDBLOCK) return absl::DeadlineExceededError("no reply in time");
      return absl::UnavailableError(absl::StrCat("recv failed: ", std::strerror(errno)));
    }
    got += static_cast<size_t>(n);
  }
  auto len = ParseFrameHeader(reinterpret_cast<const uint8_t*>(buffer), max_frame_bytes);
  if (!len.ok()) return len.status();
  const size_t have = got - kFrameHeaderBytes;  // payload bytes already here
  if (have >= *len) {
    *extra = have > *len;
    words->resize(*len / sizeof(capnp::word));
    std::memcpy(words->data(), buffer + kFrameHeaderBytes, *len);
    return absl::OkStatus();
  }
  // A larger reply: the rest as ReadFrameBlocking reads a frame (growing with
  // what arrives), after the part already here.
  std::string all(buffer + kFrameHeaderBytes, have);
  size_t need = *len - have;
  while (need > 0) {
    char chunk[1 << 14];
    ssize_t n = ::recv(fd, chunk, std::min(sizeof(chunk), need), 0);
    if (n == 0) return absl::UnavailableError("connection closed by peer");
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return absl::DeadlineExceededError("no reply in time");
      return absl::UnavailableError(absl::StrCat("recv failed: ", std::strerror(errno)));
    }
    all.append(chunk, static_cast<size_t>(n));
    need -= static_cast<size_t>(n);
  }
  words->resize(*len / sizeof(capnp::word));
  std::memcpy(words->data(), all.data(), all.size());
  return absl::OkStatus();
}

// One attempt of CallHead: an idle connection of HeadConnectionPool (or a new
// one), `request`, read the reply; the connection goes back to the pool once
// the reply was read whole. `*sent` says whether the request was written
// (then the head may have acted).
absl::StatusOr<std::vector<capnp::word>> CallHeadOnce(const std::string& head_address,
                                                      capnp::MessageBuilder& request,
                                                      std::chrono::milliseconds reply_timeout,
                                                      InjectedFault fault, bool* sent) {
  *sent = false;
  if (fault == InjectedFault::kFailBeforeSend) {
    return absl::UnavailableError("injected fault: the request failed before it was sent");
  }
  HeadConnectionPool& pool = HeadConnectionPool::Instance();
  const int64_t reply_ms = std::max<int64_t>(1, reply_timeout.count());
  const Timeouts limits = CallTimeouts();
  int fd = -1;
  bool local = false;  // a Unix stream: a write to it fails once the head closed it
  for (;;) {
    int64_t set_ms = 0;     // the receive timeout the connection has already
    bool unpolled = false;  // pooled, and not polled for a close (Take)
    fd = pool.Take(head_address, &set_ms, &unpolled);
    local = unpolled;
    if (fd < 0) {
      auto connected =
          ConnectToHead(head_address, std::min(limits.connect_timeout, reply_timeout),
                        limits.head_call_timeout, &local);
      if (!connected.ok()) return connected.status();
      fd = *connected;
    }
    if (set_ms != reply_ms) {  // a pooled connection mostly has it from its last call
      const timeval reply_limit = TimevalOf(reply_ms);
      ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &reply_limit, sizeof(reply_limit));
    }
    absl::Status written = WriteFrameBlocking(fd, request);
    if (written.ok()) break;
    ::close(fd);
    // A pooled local connection the head closed meanwhile (a restart, a
    // stop): the head got nothing of the request; another, as the poll Take
    // does for TCP ones would have found.
    if (!unpolled) return written;
  }
  *sent = true;
  if (fault == InjectedFault::kFailInFlight) {
    ::close(fd);
    return absl::UnavailableError("injected fault: the connection failed after the request was sent");
  }
  std::vector<capnp::word> words;
  // Closed before the reply: the head restarted, or it refused our token
  // (CallHead tells them apart by repetition).
  // The only reply due on this connection: header and payload in one receive.
  bool extra = false;
  if (auto s = ReadReplyBlocking(fd, 64 << 20, &words, &extra); !s.ok()) {
    ::close(fd);
    return s;
  }
  if (extra) {
    ::close(fd);  // the head sent something unasked: not reusable
  } else {
    pool.Give(head_address, fd, reply_ms, local);  // read whole: nothing in flight on it
  }
  if (fault == InjectedFault::kDropReply) {
    return absl::UnavailableError("injected fault: the head's reply was dropped");
  }
  return words;
}

}  // namespace

namespace {

absl::Mutex call_timeouts_mu;
// Null: Timeouts::FromEnv() (read on first use).
Timeouts* call_timeouts ABSL_GUARDED_BY(call_timeouts_mu) = nullptr;

}  // namespace

void SetCallTimeouts(const Timeouts& timeouts) {
  absl::MutexLock lock(&call_timeouts_mu);
  if (call_timeouts == nullptr) call_timeouts = new Timeouts();  // kept: read at exit too
  *call_timeouts = timeouts;
}

Timeouts CallTimeouts() {
  absl::MutexLock lock(&call_timeouts_mu);
  if (call_timeouts == nullptr) call_timeouts = new Timeouts(Timeouts::FromEnv());
  return *call_timeouts;
}

namespace {

absl::Mutex reconnect_mu;
HeadReconnect reconnect_setting ABSL_GUARDED_BY(reconnect_mu);

absl::Status TokenRefusal(const std::string& head_address) {
  return absl::PermissionDeniedError(absl::StrCat(
      "the head at ", head_address,
      " closed the connection: a head listening beyond loopback needs the cluster's token "
      "(--token, LUMEN_TOKEN or Config::token)"));
}

}  // namespace

void SetHeadReconnect(HeadReconnect reconnect) {
  absl::MutexLock lock(&reconnect_mu);
  reconnect_setting = reconnect;
}

HeadReconnect GetHeadReconnect() {
  absl::MutexLock lock(&reconnect_mu);
  return reconnect_setting;
}

absl::Status HeadLostError(const std::string& head_address, const HeadReconnect& reconnect,
                           std::chrono::milliseconds waited, const absl::Status& last) {
  if (!reconnect.head_persistent) {
    return absl::UnavailableError(absl::StrCat(
        "the head at ", head_address,
        " was lost and its persistence is off (--head-persistence none), so it does not come "
        "back: ",
        last.message()));
  }
  return absl::UnavailableError(absl::StrCat(
      "the head at ", head_address, " did not come back within ", waited.count(),
      " ms (LUMEN_HEAD_RECONNECT_TIMEOUT_MS): ", last.message()));
}

// Blocking (WriteFrameBlocking, ReadFrameBlocking, a blocking resolve, a
// connect bounded by its deadline): called from user threads, the CLI, and
// start-up or shutdown code, never from an event loop's thread (the core
// worker's io thread uses HeadRequester, asynchronous with a deadline; the
// node daemon and the head do not call it). Retried as control_retry.h says,
// with one retry key for every attempt: the first kControlAttempts quickly,
// then, while the head is unreachable (a restart), with GetHeadReconnect()'s
// backoff until it comes back or the reconnect timeout passes.
absl::StatusOr<std::vector<capnp::word>> CallHead(
    const std::string& head_address, const std::function<void(proto::Envelope::Builder)>& fill,
    std::optional<std::chrono::milliseconds> reply_limit) {
  const std::chrono::milliseconds reply_timeout =
      reply_limit.value_or(CallTimeouts().head_call_timeout);
  auto colon = head_address.rfind(':');
  if (colon == std::string::npos) {
    return absl::InvalidArgumentError("the head address must be HOST:PORT, got '" + head_address + "'");
  }
  OutMessage out;
  auto env = out.Init();
  env.setRequestId(1);
  fill(env);
  SetRetryKey(env);
  const bool resend_safe = SafeToResend(env.asReader());
  const HeadReconnect reconnect = GetHeadReconnect();
  Backoff backoff({.initial = reconnect.initial,
                   .max = std::max(reconnect.initial, reconnect.max),
                   .give_up_after = reconnect.give_up_after});
  int closed_in_a_row = 0;  // connections closed after the request was written
  absl::Status last;
  for (int attempt = 0;; ++attempt) {
    SetRetryAttempt(env, static_cast<uint32_t>(attempt));
    bool sent = false;
    const InjectedFault fault = FaultInjector::Draw(env.asReader());
    auto reply = CallHeadOnce(head_address, out.builder(), reply_timeout, fault, &sent);
    if (reply.ok()) return reply;
    last = reply.status();
    // A reply that did not come in time is not retried.
    if (last.code() != absl::StatusCode::kUnavailable) return last;
    const bool closed = sent && fault == InjectedFault::kNone;
    closed_in_a_row = closed ? closed_in_a_row + 1 : 0;
    if (sent && !resend_safe) {
      return absl::UnavailableError(absl::StrCat(
          last.message(),
          "; not retried: the head may or may not have acted on the request (a head beyond "
          "loopback also closes the connection of a wrong token)"));
    }
    // Closed after the request several times in a row with the head
    // reachable: a refusal (a wrong token), not a restart.
    if (closed_in_a_row >= 3) return TokenRefusal(head_address);
    if (attempt + 1 < kControlAttempts) {
      std::this_thread::sleep_for(ControlRetryBackoff(attempt + 1));
      continue;
    }
    // Past the quick attempts: the head is gone; wait for it to come back.
    if (reconnect.give_up_after.count() <= 0) {
      return closed ? TokenRefusal(head_address) : last;
    }
    const auto now = std::chrono::steady_clock::now();
    backoff.Start(now);
    if (!reconnect.head_persistent || backoff.Expired(now)) {
      return HeadLostError(head_address, reconnect, backoff.Elapsed(now), last);
    }
    std::this_thread::sleep_for(backoff.NextDelay());  // the retry's backoff, not a wait on work
  }
}

absl::Status ReadReply(const std::vector<capnp::word>& words, const char* peer,
                       const std::function<absl::Status(proto::Envelope::Reader)>& read) {
  try {
    capnp::FlatArrayMessageReader reader(kj::arrayPtr(words.data(), words.size()));
    return read(reader.getRoot<proto::Envelope>());
  } catch (const kj::Exception& e) {
    return absl::InternalError(
        absl::StrCat("bad reply from ", peer, ": ", e.getDescription().cStr()));
  }
}

absl::Status UnexpectedReply(const char* peer) {
  return absl::InternalError(absl::StrCat("unexpected reply from ", peer));
}

absl::StatusOr<std::vector<NodeView>> QueryNodes(const std::string& head_address) {
  auto reply = CallHead(head_address, [](proto::Envelope::Builder env) { env.setGetNodes(); });
  if (!reply.ok()) return reply.status();
  std::vector<NodeView> nodes;
  absl::Status read = ReadReply(*reply, "the head", [&](proto::Envelope::Reader env) {
    if (!env.isNodes()) return UnexpectedReply("the head");
    for (auto n : env.getNodes()) nodes.push_back(ToNodeView(n));
    return absl::OkStatus();
  });
  if (!read.ok()) return read;
  return nodes;
}

namespace {
NodeView ToNodeView(proto::NodeStats::Reader n) {
  NodeView v;
  v.id = IdFrom<NodeId>(n.getNodeId());
  v.address = n.getAddress().cStr();
  v.hostname = n.getHostname().cStr();
  v.pid = n.getPid();
  v.alive = n.getAlive();
  v.total = ReadResources(n.getTotal());
  v.available = ReadResources(n.getAvailable());
  v.store_capacity = n.getStoreCapacity();
  v.store_used = n.getStoreUsed();
  v.store_objects = n.getStoreObjects();
  if (n.hasStoreSummary()) {
    auto s = n.getStoreSummary();
    v.store = NodeView::StoreSummary{.pinned_bytes = s.getPinnedBytes(),
                                     .pinned_objects = s.getPinnedObjects(),
                                     .spilled_bytes = s.getSpilledBytes(),
                                     .spilled_objects = s.getSpilledObjects(),
                                     .restored_bytes = s.getRestoredBytes(),
                                     .restored_objects = s.getRestoredObjects(),
                                     .spilled_total_bytes = s.getSpilledTotalBytes(),
                                     .parked_creates = s.getParkedCreates(),
                                     .repeated_requests = s.getRepeatedRequests()};
  }
  v.workers = n.getWorkers();
  v.idle_workers = n.getIdleWorkers();
  v.queued_leases = n.getQueuedLeases();
  v.active_leases = n.getActiveLeases();
  v.session_dir = n.getSessionDir().cStr();
  v.transfer_address = n.getTransferAddress().cStr();
  v.host = n.getHostAddress().cStr();
  for (auto [from, to] : {std::pair{n.getInfeasible(), &v.infeasible}, std::pair{n.getPending(), &v.pending}}) {
    for (auto d : from) {
      to->push_back({.resources = ReadResources(d.getResources()), .count = d.getCount(),
                     .name = d.getName().cStr()});
    }
  }
  return v;
}
}  // namespace

namespace {

// One request to a node daemon (hello first); returns the reply's words.
// Blocking, like CallHead: for the CLI and user threads only. The connect is
// bounded by CallTimeouts().connect_timeout, the reply (and sending) by
// node_call_timeout.
absl::StatusOr<std::vector<capnp::word>> CallNode(
    const std::string& node_address, const std::function<void(proto::Envelope::Builder)>& fill) {
  const Timeouts limits = CallTimeouts();
  const Endpoint endpoint = ParseAddress(node_address);
  const auto deadline = Clock::now() + limits.connect_timeout;
  const std::string target = absl::StrCat("the node at ", node_address);
  absl::StatusOr<int> connected =
      !endpoint.tcp.empty()
          ? ConnectTcpBounded(endpoint.tcp, deadline, target, limits.connect_timeout)
      : !endpoint.unix_path.empty()
          ? ConnectUnixBounded(endpoint.unix_path, deadline, target, limits.connect_timeout)
          : absl::InvalidArgumentError(absl::StrCat("bad address '", node_address, "'"));
  if (!connected.ok()) return connected.status();
  const int fd = *connected;
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  const timeval limit = TimevalOf(std::max<int64_t>(1, limits.node_call_timeout.count()));
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof(limit));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof(limit));
  for (int i = 0; i < 2; ++i) {
    OutMessage out;
    auto env = out.Init();
    if (i == 0) {
      InitHello(env, proto::Role::CLI);
    } else {
      env.setRequestId(1);
      fill(env);
    }
    if (auto s = WriteFrameBlocking(fd, out.builder()); !s.ok()) return s;
  }
  std::vector<capnp::word> words;
  for (int i = 0; i < 2; ++i) {  // the hello reply, then the answer
    if (auto s = ReadFrameBlocking(fd, 64 << 20, &words); !s.ok()) return s;
  }
  return words;
}

}  // namespace

absl::StatusOr<NodeView> QueryNodeStats(const std::string& node_address) {
  auto words = CallNode(node_address, [](proto::Envelope::Builder env) { env.setGetNodeStats(); });
  if (!words.ok()) return words.status();
  NodeView view;
  absl::Status read = ReadReply(*words, "the node", [&](proto::Envelope::Reader env) {
    if (!env.isNodeStats()) return UnexpectedReply("the node");
    view = ToNodeView(env.getNodeStats());
    return absl::OkStatus();
  });
  if (!read.ok()) return read;
  return view;
}

std::vector<StateRow> StateRowsOf(proto::Envelope::Reader env) {
  std::vector<StateRow> rows;
  for (auto row : env.getStateRows()) {
    StateRow out;
    for (auto f : row.getFields()) out.emplace_back(f.getKey().cStr(), StringOf(f.getValue()));
    rows.push_back(std::move(out));
  }
  return rows;
}

const char* PlacementStrategyName(proto::PlacementStrategy strategy) {
  static constexpr const char* kStrategies[] = {"PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"};
  return kStrategies[static_cast<int>(strategy) & 3];
}

absl::StatusOr<std::vector<StateRow>> QueryNodeState(const std::string& node_address,
                                                     const std::string& what) {
  auto words =
      CallNode(node_address, [&](proto::Envelope::Builder env) { env.setListState(what); });
  if (!words.ok()) return words.status();
  std::vector<StateRow> rows;
  absl::Status read = ReadReply(*words, "the node", [&](proto::Envelope::Reader env) {
    if (!env.isStateRows()) return UnexpectedReply("the node");
    rows = StateRowsOf(env);
    return absl::OkStatus();
  });
  if (!read.ok()) return read;
  return rows;
}

absl::StatusOr<NodeTaskEvents> QueryTaskEvents(const std::string& node_address) {
  auto words = CallNode(node_address, [](proto::Envelope::Builder env) { env.setGetTaskEvents(); });
  if (!words.ok()) return words.status();
  NodeTaskEvents out;
  absl::Status read = ReadReply(*words, "the node", [&](proto::Envelope::Reader env) {
    if (!env.isTaskEvents()) return UnexpectedReply("the node");
    auto batch = env.getTaskEvents();
    out.node = IdFrom<NodeId>(batch.getNodeId());
    out.dropped = batch.getDropped();
    auto events = TaskEventsFromProto(batch);
    if (!events.ok()) return events.status();
    out.events = *std::move(events);
    return absl::OkStatus();
  });
  if (!read.ok()) return read;
  return out;
}

absl::StatusOr<std::vector<WorkerLogLineView>> QueryWorkerLogs(const std::string& node_address,
                                                               int pid, const std::string& actor,
                                                               uint64_t max_bytes) {
  auto words = CallNode(node_address, [&](proto::Envelope::Builder env) {
    auto query = env.initWorkerLogs().initQuery();
    query.setWorkerPid(pid);
    query.setActorName(actor);
    query.setMaxBytes(max_bytes);
  });
  if (!words.ok()) return words.status();
  std::vector<WorkerLogLineView> lines;
  absl::Status read = ReadReply(*words, "the node", [&](proto::Envelope::Reader env) {
    if (!env.isWorkerLogs()) return UnexpectedReply("the node");
    for (auto l : env.getWorkerLogs().getLines()) {
      lines.push_back(WorkerLogLineView{l.getPid(), l.getStderr(),
                                        std::string(l.getText().cStr(), l.getText().size()),
                                        l.getName().cStr()});
    }
    return absl::OkStatus();
  });
  if (!read.ok()) return read;
  return lines;
}

absl::StatusOr<std::vector<PlacementGroupView>> QueryPlacementGroups(
    const std::string& head_address) {
  auto reply =
      CallHead(head_address, [](proto::Envelope::Builder env) { env.setListPlacementGroups(); });
  if (!reply.ok()) return reply.status();
  std::vector<PlacementGroupView> groups;
  absl::Status read = ReadReply(*reply, "the head", [&](proto::Envelope::Reader env) {
    if (!env.isPlacementGroups()) return UnexpectedReply("the head");
    for (auto g : env.getPlacementGroups()) {
      PlacementGroupView view;
      view.id = StringOf(g.getGroupId());
      view.name = g.getName().cStr();
      view.strategy = PlacementStrategyName(g.getStrategy());
      view.state = g.getState().cStr();
      view.error = g.getError().cStr();
      for (auto b : g.getBundles()) {
        view.bundles.push_back(ReadResources(b.getResources()));
        view.bundle_nodes.push_back(b.getNodeId().size() ? IdFrom<NodeId>(b.getNodeId()).Hex()
                                                         : "");
      }
      groups.push_back(std::move(view));
    }
    return absl::OkStatus();
  });
  if (!read.ok()) return read;
  return groups;
}

absl::StatusOr<NodeView> FindLocalNode(const std::string& address) {
  auto head = ResolveHeadAddress(address);
  if (!head.ok()) return head.status();
  auto nodes = QueryNodes(*head);
  if (!nodes.ok()) return nodes.status();
  char host[256] = {0};
  ::gethostname(host, sizeof(host) - 1);
  // Several nodes may run on this machine: the one started with the head first.
  const NodeView* found = nullptr;
  for (const auto& n : *nodes) {
    if (!n.alive || n.hostname != host) continue;
    if (!std::filesystem::exists(ParseAddress(n.address).unix_path)) continue;
    bool with_head = std::filesystem::exists(n.session_dir + "/head_node");
    if (found == nullptr || with_head) found = &n;
    if (with_head) break;
  }
  if (found != nullptr) return *found;
  return absl::NotFoundError(absl::StrCat("the cluster at ", *head, " has no live node on this machine"));
}

}  // namespace lumen::runtime
