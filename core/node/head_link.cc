#include "core/node/head_link.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "lumen/common/address.h"
#include "lumen/common/fault_injector.h"
#include "lumen/common/head_client.h"
#include "lumen/common/head_local_socket.h"
#include "lumen/common/logging.h"
#include "lumen/common/post.h"
#include "lumen/common/process.h"
#include "lumen/common/proto_util.h"
#include "lumen/common/unix_endpoint.h"

namespace lumen::node {

namespace asio = boost::asio;

HeadLink::HeadLink(asio::io_context& io, HeadLinkOptions options, HeadLinkCallbacks callbacks)
    : io_(io),
      options_(std::move(options)),
      callbacks_(std::move(callbacks)),
      retry_timer_(io),
      report_timer_(io),
      connect_deadline_(io),
      // From at most one health-check period: a link reset with the head
      // alive is healed well within the head's grace (period x threshold,
      // doc/reliability.md item 8) and the node goes on as itself.
      backoff_({.initial = std::min(options_.timeouts.head_retry_period,
                                    options_.timeouts.health_check_period),
                .max = std::max(options_.timeouts.head_retry_period,
                                options_.timeouts.head_retry_max_period),
                .give_up_after = options_.timeouts.head_reconnect_timeout}) {}

HeadLink::~HeadLink() { Stop(); }

std::chrono::milliseconds HeadLink::report_period() const {
  return std::max(std::chrono::milliseconds(1),
                  std::min(options_.timeouts.report_period, options_.timeouts.health_check_period));
}

void HeadLink::Start() {
  io_thread_.Check("HeadLink");
  Connect();
}

void HeadLink::Stop() {
  stopped_ = true;
  ++attempt_;
  boost::system::error_code ignored;
  retry_timer_.cancel();
  report_timer_.cancel();
  connect_deadline_.cancel();
  if (resolver_) resolver_->cancel();
  if (connecting_) connecting_->close(ignored);
  if (connecting_local_) connecting_local_->close(ignored);
  if (conn_ && !conn_->closed()) conn_->Close(absl::CancelledError("node daemon stopping"));
}

void HeadLink::Leave(const NodeId& node) {
  io_thread_.Check("HeadLink");
  if (conn_ && !conn_->closed()) {
    // Leaving on purpose: the head marks us dead now, without a warning.
    // (Best effort: sent now unless other frames are still queued.)
    OutMessage out;
    out.Init().setMarkNodeDead(DataOf(node));
    std::string frame;
    AppendFrame(out.builder(), &frame);
    if (!conn_->TrySendNow(frame)) LUMEN_LOG(DEBUG) << "the head was not told this node left";
  }
  Stop();
}

void HeadLink::SendJobEnded(const JobId& job) {
  io_thread_.Check("HeadLink");
  if (!conn_ || conn_->closed()) return;
  OutMessage out;
  out.Init().setJobEnded(DataOf(job));
  conn_->Send(out.builder());
}

void HeadLink::FirstAttemptDone() {
  if (first_attempt_done_) return;
  first_attempt_done_ = true;
  if (callbacks_.after_first_attempt) callbacks_.after_first_attempt();
}

void HeadLink::OnLost(const absl::Status& why) {
  const bool was_registered = registered_;
  registered_ = false;
  report_timer_.cancel();
  if (stopped_) return;
  if (options_.parent_fd >= 0) {
    // Readable: closed by the driver that started the cluster, whose head
    // stops with it (a send to it fails at once on its Unix socket, before
    // this node has read that close and stopped).
    pollfd p{.fd = options_.parent_fd, .events = POLLIN, .revents = 0};
    if (::poll(&p, 1, 0) > 0 && (p.revents & (POLLIN | POLLHUP)) != 0) return;
  }
  if (was_registered && !head_persistent_) {
    // A reset link looks the same as a lost head: try to come back as this
    // node for as long as the head keeps a disconnected node (its grace).
    const auto grace = TimesCapped(options_.timeouts.health_check_period,
                                   std::max(1, options_.timeouts.health_check_failure_threshold));
    rejoin_deadline_ = std::chrono::steady_clock::now() + grace;
    backoff_.Start(std::chrono::steady_clock::now());
    LUMEN_LOG(WARNING) << "lost the head at " << options_.head_address << " (" << why.ToString()
                       << "); its persistence is off (--head-persistence none): reconnecting for "
                       << grace.count()
                       << " ms (its health-check grace); this node stops unless that head "
                          "still knows it";
    RetryLater(absl::StrCat("lost the head: ", why.ToString()));
    return;
  }
  if (ever_registered_) {
    backoff_.Start(std::chrono::steady_clock::now());
    LUMEN_LOG(WARNING) << "lost the head at " << options_.head_address << " (" << why.ToString()
                       << "); reconnecting for up to "
                       << options_.timeouts.head_reconnect_timeout.count()
                       << " ms while the node's work goes on";
  }
  RetryLater(absl::StrCat("lost the head: ", why.ToString()));
}

void HeadLink::RetryLater(const std::string& why) {
  FirstAttemptDone();
  if (stopped_) return;
  std::chrono::milliseconds delay = options_.timeouts.head_retry_period;
  if (rejoin_deadline_ && std::chrono::steady_clock::now() >= *rejoin_deadline_) {
    stopped_ = true;
    if (callbacks_.on_head_lost) {
      callbacks_.on_head_lost(absl::UnavailableError(absl::StrCat(
          "the head at ", options_.head_address,
          " was lost and did not answer within its health-check grace; its persistence is off "
          "(--head-persistence none), so its tables cannot come back: this node stops (last: ",
          why, ")")));
    }
    return;
  }
  if (backoff_.started()) {
    const auto now = std::chrono::steady_clock::now();
    if (backoff_.Expired(now)) {
      stopped_ = true;
      if (callbacks_.on_head_lost) {
        callbacks_.on_head_lost(absl::UnavailableError(absl::StrCat(
            "cannot reconnect to the head at ", options_.head_address, " within ",
            options_.timeouts.head_reconnect_timeout.count(),
            " ms (LUMEN_HEAD_RECONNECT_TIMEOUT_MS): this node stops (last: ", why, ")")));
      }
      return;
    }
    delay = backoff_.NextDelay();
    LUMEN_LOG(DEBUG) << why << "; retrying in " << delay.count() << " ms";
  } else {
    LUMEN_LOG(WARNING) << why << "; retrying";
  }
  retry_timer_.expires_after(delay);
  retry_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (!ec && !stopped_) Connect();
  });
}

void HeadLink::Connect() {
  if (stopped_) return;
  uint64_t attempt = ++attempt_;
  Endpoint endpoint = ParseAddress(options_.head_address);
  // Each attempt has one deadline for resolving and connecting.
  connect_deadline_.expires_after(options_.timeouts.connect_timeout);
  connect_deadline_.async_wait([this, attempt](const boost::system::error_code& ec) {
    if (ec || attempt != attempt_) return;
    ++attempt_;  // what completes late is ignored
    boost::system::error_code ignored;
    if (resolver_) resolver_->cancel();
    if (connecting_) connecting_->close(ignored);
    if (connecting_local_) connecting_local_->close(ignored);
    RetryLater(absl::StrCat("cannot reach the head at ", options_.head_address, " within ",
                            options_.timeouts.connect_timeout.count(), " ms"));
  });
  if (endpoint.tcp.empty() && !endpoint.unix_path.empty()) {
    connecting_local_ = std::make_shared<asio::local::stream_protocol::socket>(io_);
    connecting_local_->async_connect(
        asio::local::stream_protocol::endpoint(endpoint.unix_path),
        [this, attempt, sock = connecting_local_](const boost::system::error_code& ec) {
          if (attempt != attempt_) return;
          connect_deadline_.cancel();
          if (ec) {
            RetryLater(absl::StrCat("cannot reach the head at ", options_.head_address, ": ",
                                    ec.message()));
            return;
          }
          int fd = sock->release();
          OnConnected(Socket(io_, asio::generic::stream_protocol(AF_UNIX, 0), fd));
        });
    return;
  }
  // A head on this host's loopback: its local socket first, when it has one
  // (lumen/common/head_local_socket.h). A Unix connect completes or fails at
  // once; non-blocking, a full backlog falls back to TCP too.
  if (std::string local = HeadLocalSocketToTry(endpoint.tcp); !local.empty()) {
    asio::local::stream_protocol::socket s(io_);
    boost::system::error_code ec;
    s.open(asio::local::stream_protocol(), ec);
    if (!ec) s.non_blocking(true, ec);
    if (!ec) s.connect(UnixEndpoint(local), ec);
    // Only a head of our own user: another may have taken the name first.
    if (!ec && !HeadLocalPeerTrusted(s.native_handle())) {
      s.close(ec);
      ec = asio::error::access_denied;
    }
    if (!ec) {
      SetCloseOnExec(s.native_handle());
      // Completed: on with it from the loop, as an asynchronous connect would.
      lumen::Post(io_, "node.head_connected", [this, attempt, fd = s.release()] {
        if (attempt != attempt_ || stopped_) {
          ::close(fd);
          return;
        }
        connect_deadline_.cancel();
        OnConnected(Socket(io_, asio::generic::stream_protocol(AF_UNIX, 0), fd));
      });
      return;
    }
  }
  auto colon = endpoint.tcp.rfind(':');
  if (colon == std::string::npos) {
    connect_deadline_.cancel();
    RetryLater(absl::StrCat("bad head address '", options_.head_address, "' (want host:port)"));
    return;
  }
  ConnectTcp(endpoint.tcp.substr(0, colon), endpoint.tcp.substr(colon + 1));
}

void HeadLink::ConnectTcp(const std::string& host, const std::string& port) {
  uint64_t attempt = attempt_;
  // A numeric address (an embedded cluster's 127.0.0.1:port) needs no
  // resolver: asio's resolves on a thread of its own, started for the first
  // one, and a node's start waits for this connect (issue 8: init_seconds).
  boost::system::error_code parse_error;
  asio::ip::address ip = asio::ip::make_address(host, parse_error);
  uint32_t port_number = 0;
  if (!parse_error && absl::SimpleAtoi(port, &port_number) && port_number <= 65535) {
    ConnectEndpoints({asio::ip::tcp::endpoint(ip, static_cast<uint16_t>(port_number))}, attempt);
    return;
  }
  resolver_ = std::make_shared<asio::ip::tcp::resolver>(io_);
  resolver_->async_resolve(
      host, port,
      [this, attempt, resolver = resolver_](const boost::system::error_code& ec,
                                            asio::ip::tcp::resolver::results_type results) {
        if (attempt != attempt_) return;
        if (ec) {
          connect_deadline_.cancel();
          RetryLater(absl::StrCat("cannot resolve the head at ", options_.head_address, ": ",
                                  ec.message()));
          return;
        }
        ConnectEndpoints({results.begin(), results.end()}, attempt);
      });
}

void HeadLink::ConnectEndpoints(std::vector<asio::ip::tcp::endpoint> endpoints, uint64_t attempt) {
  connecting_ = std::make_shared<asio::ip::tcp::socket>(io_);
  asio::async_connect(*connecting_, endpoints,
                      [this, attempt, sock = connecting_](const boost::system::error_code& ec,
                                                          const asio::ip::tcp::endpoint&) {
                        if (attempt != attempt_) return;
                        connect_deadline_.cancel();
                        if (ec) {
                          RetryLater(absl::StrCat("cannot reach the head at ",
                                                  options_.head_address, ": ", ec.message()));
                          return;
                        }
                        OnConnected(AdoptTcp(io_, std::move(*sock)));
                      });
}

void HeadLink::OnConnected(Socket socket) {
  io_thread_.Check("HeadLink");
  connecting_.reset();
  connecting_local_.reset();
  resolver_.reset();
  conn_ = Connection::Create(std::move(socket));
  conn_->Start([this](Connection&, proto::Envelope::Reader m) { OnFrame(m); },
               [this](Connection&, const absl::Status& why) { OnLost(why); });
  {
    OutMessage out;
    runtime::InitHello(out.Init(), proto::Role::NODE);
    conn_->Send(out.builder());
  }
  OutMessage out;
  // Persistence off and lost: only as a node this head knows (rejoinNode).
  callbacks_.fill_stats(rejoin_deadline_ ? out.Init().initRejoinNode()
                                         : out.Init().initRegisterNode());
  conn_->Send(out.builder());
  ReportLater();
  // Ready once the head answers the registration with its first view (which
  // lists this node): a driver started next then finds the node at the head.
}

void HeadLink::DropLinkOnPurpose(proto::Envelope::Reader msg, const char* when) {
  LUMEN_LOG(WARNING) << "fault injection (LUMEN_FAULT_INJECT): dropping the link to the head "
                     << when << " " << FaultInjector::MessageName(msg) << " (request "
                     << msg.getRequestId() << ")";
  if (conn_ && !conn_->closed()) {
    conn_->Close(absl::UnavailableError("link dropped on purpose (fault injection)"));
  }
}

void HeadLink::ReportLater() {
  report_timer_.expires_after(report_period());
  report_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec || stopped_ || !conn_ || conn_->closed()) return;
    OutMessage out;
    callbacks_.fill_stats(out.Init().initReportNode());
    conn_->Send(out.builder());
    ReportLater();
  });
}

void HeadLink::OnFrame(proto::Envelope::Reader msg) {
  io_thread_.Check("HeadLink");
  switch (msg.which()) {
    case proto::Envelope::CLUSTER_VIEW:
      head_persistent_ = msg.getClusterView().getHeadPersistent();
      if (!registered_) {
        if (backoff_.started()) {
          LUMEN_LOG(WARNING) << "registered again with the head at " << options_.head_address
                             << " after "
                             << backoff_.Elapsed(std::chrono::steady_clock::now()).count()
                             << " ms without it";
        }
        if (rejoin_deadline_) {
          LUMEN_LOG(WARNING) << "the head at " << options_.head_address
                             << " took this node back (its link was reset, not the head lost)";
          rejoin_deadline_.reset();
        }
        backoff_.Reset();
        registered_ = true;
        ever_registered_ = true;
      }
      callbacks_.on_cluster_view(msg.getClusterView());
      FirstAttemptDone();
      return;
    case proto::Envelope::PREPARE_BUNDLES:
    case proto::Envelope::COMMIT_BUNDLES:
    case proto::Envelope::CANCEL_BUNDLES: {
      // A batch the head resent (its connection was reset before our reply
      // reached it) gets the reply we made the first time, on any connection.
      // Faults are drawn for a batch seen for the first time only; one lost
      // unread is not remembered, so its resend is acted on.
      const InjectedFault fault = FaultInjector::Active() && !keyed_.Known(msg)
                                      ? FaultInjector::Draw(msg)
                                      : InjectedFault::kNone;
      if (fault == InjectedFault::kFailBeforeSend) {
        DropLinkOnPurpose(msg, "before acting on it");
        return;
      }
      if (conn_ && keyed_.Repeat(*conn_, msg, /*bound=*/false)) return;
      absl::Status status = callbacks_.on_bundles(msg);
      OutMessage out;
      auto env = out.Init();
      env.setRequestId(msg.getRequestId());
      auto reply = env.initBundleReply();
      reply.setOk(status.ok());
      reply.setError(std::string(status.message()));
      if (conn_) keyed_.OnReply(conn_->id(), msg.getRequestId(), out.builder());
      if (fault != InjectedFault::kNone) {
        DropLinkOnPurpose(msg, "after acting on it");  // the reply is lost
      } else if (conn_ && !conn_->closed()) {
        conn_->Send(out.builder());
      }
      if (callbacks_.after_bundles) callbacks_.after_bundles(msg);
      return;
    }
    case proto::Envelope::MARK_NODE_DEAD:
      if (rejoin_deadline_ && !registered_) {
        // Persistence off: the head that answers does not know us (it
        // restarted without its tables, or declared us dead meanwhile).
        stopped_ = true;
        if (callbacks_.on_head_lost) {
          callbacks_.on_head_lost(absl::UnavailableError(absl::StrCat(
              "the head at ", options_.head_address,
              " does not know this node any more (it restarted, and its persistence is off: "
              "--head-persistence none, or it declared this node dead): this node stops")));
        }
        return;
      }
      LUMEN_LOG(ERROR) << "the head declared this node dead (it missed its health checks); "
                          "stopping";
      callbacks_.on_marked_dead();
      return;
    default:
      return;
  }
}

}  // namespace lumen::node
