// The head's composition root: the event loop, the listener, hello and token
// admission, and the dispatch of each frame to the part that owns it (node
// table, job table, key-value store, named actors, placement groups).
#include "lumen/head/head_service.h"

#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio.hpp>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <algorithm>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/head/cluster_view_publisher.h"
#include "core/head/dashboard_routes.h"
#include "core/head/head_state_recorder.h"
#include "core/head/head_store_factory.h"
#include "core/head/head_replies.h"
#include "core/head/http_server.h"
#include "core/head/metrics_exporter.h"
#include "core/head/job_table.h"
#include "core/head/kv_service.h"
#include "core/head/named_actor_service.h"
#include "core/head/node_probe.h"
#include "core/head/node_table.h"
#include "core/head/placement_group_service.h"
#include "core/head/request_deduplicator.h"
#include "lumen/common/accept_retry.h"
#include "lumen/common/address.h"
#include "lumen/common/connection.h"
#include "lumen/common/head_local_socket.h"
#include "lumen/common/ids.h"
#include "lumen/common/logging.h"
#include "lumen/common/process.h"
#include "lumen/common/proto_util.h"
#include "lumen/common/thread_checker.h"
#include "lumen/common/post.h"
#include "lumen/common/unix_endpoint.h"

namespace lumen::head {
namespace {

namespace asio = boost::asio;

// Owns the head's parts and routes frames to them. Everything runs on the one
// thread that calls Run (checked in debug builds); the parts borrow the
// connection table through FindOpenConnection.
class HeadService {
 public:
  explicit HeadService(const HeadOptions& options)
      : options_(options),
        acceptor_(io_),
        signals_(io_, SIGTERM, SIGINT),
        admission_(ServerLimits::FromEnv(), "head"),
        nodes_({.health_check_period = options.timeouts.health_check_period,
                .failure_threshold = options.timeouts.health_check_failure_threshold}),
        kv_({.io = &io_,
             .limits = KvLimits::FromEnv(options.kv_limits),
             .max_wait = options.timeouts.max_parked_wait,
             .find_connection = FindConnectionFn(),
             .recorder = &recorder_}),
        names_({.max_named_actors = options.limits.max_named_actors,
                .max_name_bytes = options.limits.max_name_bytes},
               &recorder_),
        groups_({.io = &io_,
                 .nodes = &nodes_,
                 .limits = options.limits,
                 .max_wait = options.timeouts.max_parked_wait,
                 .find_connection = FindConnectionFn(),
                 .on_view_changed = [this] { views_.Broadcast(); },
                 .recorder = &recorder_}),
        views_({.nodes = &nodes_,
                .jobs = &jobs_,
                .groups = &groups_.manager(),
                .removed_groups = &groups_.removed(),
                .send = [this](uint64_t id, capnp::MessageBuilder& message) {
                  Connection* conn = FindOpenConnection(id);
                  if (conn != nullptr) conn->Send(message);
                  return conn != nullptr;
                }}),
        health_timer_(io_),
        probe_(io_, options.timeouts.health_check_period) {}

  int Run();
  asio::io_context& io() { return io_; }
  // ServeConnectionForTesting: serves `socket` until it closes.
  void ServeUntilClosed(Socket socket);

 private:
  std::function<Connection*(uint64_t)> FindConnectionFn() {
    return [this](uint64_t id) { return FindOpenConnection(id); };
  }
  Connection* FindOpenConnection(uint64_t id) {
    auto it = conns_.find(id);
    return it == conns_.end() || it->second->closed() ? nullptr : it->second.get();
  }
  // Reports `line` to whoever started us (the ready pipe), if anyone.
  void TellStarter(const std::string& line);
  void Stop();
  void AcceptNext();
  void ListenLocally();
  void AcceptNextLocal();
  // Admits an accepted connection and starts reading it.
  void Serve(Socket socket);
  // Health checks: a node silent for `failure_threshold` periods is dead.
  // When this check runs late (the head was starved), the delay is excused:
  // the nodes' reports may be waiting unread in our sockets.
  void CheckHealth();
  // The HTTP server with GET /metrics and the dashboard (/, /api/cluster);
  // false when it was asked for and cannot serve.
  bool StartHttp();
  // The head's own counters for /metrics (Prometheus text).
  std::string HeadCounters() const;

  void OnFrame(Connection& conn, proto::Envelope::Reader msg);
  // The first frame: a hello with our protocol version (and the token when we
  // listen beyond loopback); false when the connection was closed.
  bool AdmitHello(Connection& conn, proto::Envelope::Reader msg);
  // True (and the frame dropped) when `conn` belongs to a node incarnation
  // declared dead: the head's epoch check on every frame from a node.
  bool RefuseStaleNodeFrame(Connection& conn, proto::Envelope::Reader msg);
  // Node frames: registration, reports, leaving, ended jobs, the node list.
  bool HandleNodeFrame(Connection& conn, proto::Envelope::Reader msg);
  void OnReport(Connection& conn, proto::NodeStats::Reader stats, bool registering);
  // What follows nodes being declared dead: they are told (if they still
  // listen), their drivers' jobs end, their bundles are placed again, and the
  // others get a new view.
  void OnNodesDead(const std::vector<NodeTable::DeadNode>& dead);
  void OnClose(Connection& conn, const absl::Status& why);
  // Opens the store the options name and puts its tables back; false (told
  // to the starter) when it cannot be opened or read.
  bool RestoreState();
  // Ends `job` (its driver left or its node died): recorded, true when new.
  bool EndJob(const JobId& job);

  HeadOptions options_;
  asio::io_context io_;
  asio::ip::tcp::acceptor acceptor_;
  // Keeps the accept loop alive through EMFILE and the like (io thread only).
  AcceptRetry accept_retry_{io_, "head listener"};
  // The same head for this host's processes, on an abstract Unix socket
  // (lumen/common/head_local_socket.h); open when bound to loopback.
  asio::local::stream_protocol::acceptor local_acceptor_{io_};
  AcceptRetry local_accept_retry_{io_, "head local listener"};
  asio::signal_set signals_;
  std::optional<asio::posix::stream_descriptor> parent_watch_;
  std::string address_;
  bool require_token_ = false;
  HelloAdmission admission_;
  absl::flat_hash_map<uint64_t, std::shared_ptr<Connection>> conns_;
  // Persistence (before the tables that borrow it). No store until Run.
  HeadStateRecorder recorder_{nullptr};
  uint64_t ended_jobs_recorded_ = 0;  // the order of the last ended job recorded
  NodeTable nodes_;
  JobTable jobs_;
  KvService kv_;
  NamedActorService names_;
  PlacementGroupService groups_;
  RequestDeduplicator dedup_;  // retried control requests (doc/reliability.md, item 9)
  ClusterViewPublisher views_;
  asio::steady_timer health_timer_;
  NodeProbe probe_;  // is a disconnected node's daemon still there?
  // When the next health check is due (its timer's expiry); unset before the first.
  std::optional<std::chrono::steady_clock::time_point> next_check_;
  std::unique_ptr<HttpServer> http_;  // when options_.metrics_port >= 0
  std::unique_ptr<DashboardRoutes> dashboard_;  // on http_
  ThreadChecker loop_thread_;
};

int HeadService::Run() {
  logging::SetProcessTag("head");
  boost::system::error_code ec;
  asio::ip::tcp::endpoint endpoint(asio::ip::make_address(options_.host, ec), options_.port);
  if (!ec) acceptor_.open(endpoint.protocol(), ec);
  if (!ec) SetCloseOnExec(acceptor_.native_handle());
  if (!ec) acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor_.bind(endpoint, ec);
  if (!ec) acceptor_.listen(512, ec);
  if (ec) {
    LUMEN_LOG(ERROR) << "head cannot listen on " << options_.host << ":" << options_.port << ": "
                     << ec.message();
    TellStarter(absl::StrCat("error cannot listen on ", options_.host, ":", options_.port, ": ",
                             ec.message(), "\n"));
    return 1;
  }
  address_ = absl::StrCat(options_.host, ":", acceptor_.local_endpoint().port());
  // Beyond loopback, every connection must prove it holds the token.
  require_token_ = !IsLoopbackHost(options_.host);
  if (require_token_ && options_.token.empty()) {
    LUMEN_LOG(ERROR) << "the head listens on " << options_.host << " but has no token";
    return 1;
  }
  signals_.async_wait([this](const boost::system::error_code& e, int) {
    if (!e) Stop();
  });
  if (options_.parent_fd >= 0) {
    parent_watch_.emplace(io_, options_.parent_fd);
    auto buf = std::make_shared<char>();
    parent_watch_->async_read_some(
        asio::buffer(buf.get(), 1), [this, buf](const boost::system::error_code&, size_t) { Stop(); });
  }
  if (!RestoreState()) return 1;
  if (!StartHttp()) return 1;
  AcceptNext();
  ListenLocally();
  CheckHealth();
  TellStarter(absl::StrCat("ready ", address_, "\n"));
  if (options_.ready_fd >= 0) ::close(options_.ready_fd);
  LUMEN_LOG(INFO) << "head serving on " << address_;
  io_.run();
  return 0;
}

std::string HeadService::HeadCounters() const {
  std::string page;
  absl::StrAppend(&page,
                    "# HELP lumen_head_stale_node_messages_total Frames from node incarnations "
                    "declared dead, refused by the head.\n"
                    "# TYPE lumen_head_stale_node_messages_total counter\n"
                    "lumen_head_stale_node_messages_total ",
                    nodes_.stale_refused(), "\n",
                    "# HELP lumen_head_repeated_requests_total Retried control requests "
                    "answered with the reply to their first attempt (not acted on again).\n"
                    "# TYPE lumen_head_repeated_requests_total counter\n"
                    "lumen_head_repeated_requests_total ",
                    dedup_.replayed(), "\n",
                    "# HELP lumen_head_node_reconnects_total Alive nodes that registered again "
                    "on a new connection (a reset link, a restarted head).\n"
                    "# TYPE lumen_head_node_reconnects_total counter\n"
                    "lumen_head_node_reconnects_total ",
                    nodes_.rejoined(), "\n",
                    "# HELP lumen_head_nodes_declared_dead_total Nodes declared dead (silent, "
                    "disconnected past the grace, or left).\n"
                    "# TYPE lumen_head_nodes_declared_dead_total counter\n"
                    "lumen_head_nodes_declared_dead_total ",
                    nodes_.declared_dead(), "\n",
                    "# HELP lumen_head_placement_group_rollbacks_total Placement-group attempts "
                    "or created groups undone (a node refused or died).\n"
                    "# TYPE lumen_head_placement_group_rollbacks_total counter\n"
                    "lumen_head_placement_group_rollbacks_total ",
                    groups_.manager().rollbacks(), "\n",
                    "# HELP lumen_head_bundle_requests_resent_total Bundle prepares, commits and "
                    "cancels sent again, with their keys, to a node that registered again.\n"
                    "# TYPE lumen_head_bundle_requests_resent_total counter\n"
                    "lumen_head_bundle_requests_resent_total ",
                    groups_.manager().resent_phases() + groups_.manager().resent_cancels(), "\n");
  return page;
}

bool HeadService::StartHttp() {
  if (options_.metrics_port < 0) return true;
  http_ = std::make_unique<HttpServer>(
      io_, HttpServerOptions{.host = options_.metrics_host,
                             .port = options_.metrics_port,
                             .token = options_.token,
                             .request_timeout = options_.timeouts.http_request_timeout});
  // The nodes' last reports and the head's counters now; actors by state
  // once the live nodes listed what their processes own (as the dashboard).
  http_->RouteAsync("/metrics", [this](const HttpRequest&, HttpServer::Respond respond) {
    auto nodes = std::make_shared<capnp::MallocMessageBuilder>();
    dashboard_->GatherFromLiveNodes(nodes, [nodes, head = HeadCounters(), respond = std::move(respond)](
                                               std::vector<NodeAnswer> answers) {
      ActorStateCounts actor_states;
      for (const NodeAnswer& answer : answers) {
        for (const runtime::StateRow& row : answer.actors) {
          for (const auto& [key, value] : row) {
            if (key == "STATE") ++actor_states[value];
          }
        }
      }
      std::string page = RenderMetrics(
          nodes->getRoot<proto::ClusterView>().getNodes().asReader(), &actor_states);
      page += head;
      respond(HttpResponse{200, "text/plain; version=0.0.4; charset=utf-8", std::move(page)});
    });
  });
  dashboard_ = std::make_unique<DashboardRoutes>(DashboardRoutes::Options{
      .io = &io_,
      .http = http_.get(),
      .token = options_.token,
      .node_timeout = options_.timeouts.list_state_timeout + std::chrono::seconds(1),
      .fill_nodes =
          [this](capnp::MallocMessageBuilder& out) {
            nodes_.FillNodes(out.initRoot<proto::ClusterView>().initNodes(nodes_.size()));
          },
      .fill_groups =
          [this](capnp::MallocMessageBuilder& out) {
            groups_.FillList(out.initRoot<proto::Envelope>());
          }});
  dashboard_->Install();
  if (auto s = http_->Start(); !s.ok()) {
    LUMEN_LOG(ERROR) << "head: " << s.message();
    TellStarter(absl::StrCat("error ", s.message(), "\n"));
    return false;
  }
  std::string url = absl::StrCat("http://", options_.metrics_host, ":", http_->port(), "/metrics");
  if (!options_.session_dir.empty()) {
    std::ofstream(options_.session_dir + "/metrics_address")
        << options_.metrics_host << ":" << http_->port() << "\n";
  }
  LUMEN_LOG(INFO) << "head serving metrics at " << url << " and the dashboard at http://"
                  << options_.metrics_host << ":" << http_->port() << "/";
  return true;
}

void HeadService::TellStarter(const std::string& line) {
  if (options_.ready_fd < 0) return;
  if (::write(options_.ready_fd, line.data(), line.size()) < 0) {
    LUMEN_LOG(WARNING) << "head: cannot write to the ready pipe: " << std::strerror(errno);
  }
}

void HeadService::Stop() {
  boost::system::error_code ignored;
  acceptor_.close(ignored);
  accept_retry_.Stop();
  local_acceptor_.close(ignored);
  local_accept_retry_.Stop();
  if (http_) http_->Stop();
  io_.stop();
}

void HeadService::AcceptNext() {
  acceptor_.async_accept([this](const boost::system::error_code& ec, asio::ip::tcp::socket s) {
    if (!accept_retry_.Accepted(ec, acceptor_.is_open(), [this] { AcceptNext(); })) return;
    Serve(AdoptTcp(io_, std::move(s)));
    AcceptNext();
  });
}

void HeadService::ListenLocally() {
  const std::string name = HeadLocalSocketName(address_);
  if (name.empty()) return;  // beyond loopback: TCP only
  boost::system::error_code ec;
  local_acceptor_.open(asio::local::stream_protocol(), ec);
  if (!ec) SetCloseOnExec(local_acceptor_.native_handle());
  if (!ec) local_acceptor_.bind(UnixEndpoint(name), ec);
  if (!ec) local_acceptor_.listen(512, ec);
  if (ec) {
    // Taken (another head bound to this address in this namespace is not
    // possible; a stray process is): clients fall back to TCP.
    LUMEN_LOG(WARNING) << "head: no local socket " << name << " (" << ec.message()
                       << "); this host's clients use TCP";
    boost::system::error_code ignored;
    local_acceptor_.close(ignored);
    return;
  }
  AcceptNextLocal();
}

void HeadService::AcceptNextLocal() {
  local_acceptor_.async_accept(
      [this](const boost::system::error_code& ec, asio::local::stream_protocol::socket s) {
        if (!local_accept_retry_.Accepted(ec, local_acceptor_.is_open(),
                                          [this] { AcceptNextLocal(); })) {
          return;
        }
        int fd = s.release();
        Serve(Socket(io_, asio::generic::stream_protocol(AF_UNIX, 0), fd));
        AcceptNextLocal();
      });
}

void HeadService::Serve(Socket socket) {
  auto conn = admission_.Admit(std::move(socket));
  if (!conn) return;
  conn->context() = false;  // hello seen
  conns_[conn->id()] = conn;
  conn->Start([this](Connection& c, proto::Envelope::Reader m) { OnFrame(c, m); },
              [this](Connection& c, const absl::Status& why) { OnClose(c, why); });
}

void HeadService::ServeUntilClosed(Socket socket) {
  Serve(std::move(socket));
  while (!conns_.empty() && io_.run_one() > 0) {
  }
  // What the close posted (the connection's release).
  io_.poll();
}

void HeadService::CheckHealth() {
  loop_thread_.Check("HeadService");
  const auto now = std::chrono::steady_clock::now();
  if (next_check_.has_value() && now > *next_check_) {
    const auto stall = now - *next_check_;
    if (stall > options_.timeouts.health_check_period) {
      static auto* limiter = new logging::RateLimiter(1, std::chrono::seconds(10));
      uint64_t suppressed = 0;
      if (limiter->Allow(&suppressed)) {
        LUMEN_LOG(WARNING) << "head: health check ran "
                           << std::chrono::duration_cast<std::chrono::milliseconds>(stall).count()
                           << " ms late (the head is starved of CPU); that time is not counted "
                              "against the nodes ("
                           << suppressed << " more suppressed)";
      }
    }
    nodes_.ExcuseSilence(stall, now);
  }
  OnNodesDead(nodes_.ExpireSilent(now));
  next_check_ = now + options_.timeouts.health_check_period;
  health_timer_.expires_at(*next_check_);
  health_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (!ec) CheckHealth();
  });
}

void HeadService::OnFrame(Connection& conn, proto::Envelope::Reader msg) {
  loop_thread_.Check("HeadService");
  bool& hello_seen = std::any_cast<bool&>(conn.context());
  if (!hello_seen) {
    hello_seen = AdmitHello(conn, msg);
    return;
  }
  if (RefuseStaleNodeFrame(conn, msg)) return;
  if (dedup_.Repeat(conn, msg)) return;  // a retried request: acted on once
  if (kv_.Handle(conn, msg) || names_.Handle(conn, msg) || groups_.Handle(conn, msg) ||
      HandleNodeFrame(conn, msg)) {
    return;
  }
  static auto* limiter = new logging::RateLimiter(5, std::chrono::seconds(1));
  uint64_t suppressed = 0;
  if (limiter->Allow(&suppressed)) {
    LUMEN_LOG(WARNING) << "head: ignoring an unexpected message (" << msg.which() << ") from "
                       << conn.peer() << " (" << suppressed << " more suppressed)";
  }
}

bool HeadService::AdmitHello(Connection& conn, proto::Envelope::Reader msg) {
  if (!msg.isHello() || msg.getHello().getProtocolVersion() != proto::PROTOCOL_VERSION) {
    conn.Close(absl::PermissionDeniedError("first frame was not a valid hello"));
    return false;
  }
  auto token = msg.getHello().getToken();
  if (require_token_ &&
      !ConstantTimeEquals(std::string_view(token.cStr(), token.size()), options_.token)) {
    conn.Close(absl::PermissionDeniedError(token.size() == 0
                                               ? "connection without the cluster token"
                                               : "connection with a wrong cluster token"));
    return false;
  }
  conn.AcceptHello();
  return true;
}

bool HeadService::RefuseStaleNodeFrame(Connection& conn, proto::Envelope::Reader msg) {
  if (nodes_.RefuseIfStale(conn.id())) {
    // The epoch check: this connection's node incarnation was declared dead
    // (frozen, partitioned); what it still sends is refused, whatever it is,
    // and it is told again that it is dead (it then exits, doc/reliability.md).
    static auto* limiter = new logging::RateLimiter(5, std::chrono::seconds(1));
    uint64_t suppressed = 0;
    if (limiter->Allow(&suppressed)) {
      LUMEN_LOG(WARNING) << "head: refused a stale message (" << msg.which()
                         << ") from a node declared dead, at " << conn.peer() << " ("
                         << suppressed << " more suppressed)";
    }
    if (msg.isRegisterNode() || msg.isReportNode() || msg.isRejoinNode()) {
      auto stats = msg.isRegisterNode()  ? msg.getRegisterNode()
                   : msg.isRejoinNode() ? msg.getRejoinNode()
                                        : msg.getReportNode();
      NodeId id = IdFrom<NodeId>(stats.getNodeId());
      SendReply(conn, 0, [&](proto::Envelope::Builder env) { env.setMarkNodeDead(DataOf(id)); });
    }
    return true;
  }
  return false;
}

bool HeadService::HandleNodeFrame(Connection& conn, proto::Envelope::Reader msg) {
  switch (msg.which()) {
    case proto::Envelope::REGISTER_NODE:
      OnReport(conn, msg.getRegisterNode(), /*registering=*/true);
      return true;
    case proto::Envelope::REJOIN_NODE: {
      // A node of a head without persistence whose link closed: it may come
      // back only as a node this head knows (doc/reliability.md, item 8);
      // otherwise (this head restarted) it is told to stop.
      NodeId id = IdFrom<NodeId>(msg.getRejoinNode().getNodeId());
      const NodeTable::Node* known = nodes_.Find(id);
      if (known == nullptr || !known->alive) {
        LUMEN_LOG(WARNING) << "head: node " << id.Hex().substr(0, 12)
                           << " asked to rejoin, but this head does not know it alive; told to stop";
        SendReply(conn, 0, [&](proto::Envelope::Builder env) { env.setMarkNodeDead(DataOf(id)); });
        return true;
      }
      OnReport(conn, msg.getRejoinNode(), /*registering=*/true);
      return true;
    }
    case proto::Envelope::REPORT_NODE:
      OnReport(conn, msg.getReportNode(), /*registering=*/false);
      return true;
    case proto::Envelope::MARK_NODE_DEAD:
      // A node leaving on purpose (lumen stop, its driver exited).
      OnNodesDead(nodes_.Leave(IdFrom<NodeId>(msg.getMarkNodeDead()), conn.id()));
      return true;
    case proto::Envelope::JOB_ENDED:
      if (EndJob(IdFrom<JobId>(msg.getJobEnded()))) views_.Broadcast();
      return true;
    case proto::Envelope::GET_NODES:
      SendReply(conn, msg.getRequestId(),
                [&](proto::Envelope::Builder env) { nodes_.FillNodes(env.initNodes(nodes_.size())); });
      return true;
    default:
      return false;
  }
}

void HeadService::OnReport(Connection& conn, proto::NodeStats::Reader stats, bool registering) {
  NodeId id = IdFrom<NodeId>(stats.getNodeId());
  switch (nodes_.Report(conn.id(), stats, std::chrono::steady_clock::now(), registering)) {
    case NodeTable::ReportOutcome::kRefused:
      // Declared dead once: its old incarnation may not come back. A late
      // report is dropped; a registration is told.
      if (registering) {
        SendReply(conn, 0, [&](proto::Envelope::Builder env) { env.setMarkNodeDead(DataOf(id)); });
      }
      return;
    case NodeTable::ReportOutcome::kIgnored:
      return;  // a late report on the connection it left
    case NodeTable::ReportOutcome::kRejoined:
      // Back on a new connection within the grace (doc/reliability.md, item
      // 8): the same node. What went out on its old connection may be lost:
      // it gets the whole view again, and the bundle cancels, prepares and
      // commits still unanswered go again with their keys (items 8 and 9).
      views_.Forget(id);
      groups_.OnNodeReconnected(id);
      [[fallthrough]];
    case NodeTable::ReportOutcome::kJoined:
      if (const NodeTable::Node* node = nodes_.Find(id)) {
        recorder_.Put(HeadTable::kNodes, std::string(id.Binary()), node->stats_frame);
      }
      views_.Broadcast();
      break;
    case NodeTable::ReportOutcome::kUpdated:
      views_.SendTo(id);
      break;
  }
  groups_.Schedule();
}

void HeadService::OnNodesDead(const std::vector<NodeTable::DeadNode>& dead) {
  if (dead.empty()) return;
  for (const NodeTable::DeadNode& node : dead) {
    if (Connection* conn = FindOpenConnection(node.conn_id)) {
      SendReply(*conn, 0,
                [&](proto::Envelope::Builder env) { env.setMarkNodeDead(DataOf(node.id)); });
    }
    recorder_.Delete(HeadTable::kNodes, std::string(node.id.Binary()));
    recorder_.Put(HeadTable::kDeadNodes, std::string(node.id.Binary()), "");
    // Its drivers are gone with it: their jobs end on every node.
    for (const JobId& job : node.drivers) EndJob(job);
    views_.Forget(node.id);
    // Groups with a bundle there are placed again, whole (what ran in their
    // other bundles ends too, and restarts within its limits).
    groups_.OnNodeDead(node.id);
  }
  views_.Broadcast();
  groups_.Schedule();
}

bool HeadService::EndJob(const JobId& job) {
  if (!jobs_.End(job)) return false;
  std::string order(8, '\0');
  const uint64_t n = ++ended_jobs_recorded_;
  for (int i = 0; i < 8; ++i) order[i] = static_cast<char>((n >> (8 * i)) & 0xFF);
  recorder_.Put(HeadTable::kEndedJobs, std::string(job.Binary()), std::move(order));
  return true;
}

bool HeadService::RestoreState() {
  auto store = MakeHeadStore(options_);
  if (!store.ok()) {
    LUMEN_LOG(ERROR) << "head: " << store.status().message();
    TellStarter(absl::StrCat("error ", store.status().message(), "\n"));
    return false;
  }
  recorder_ = HeadStateRecorder(std::move(*store));
  views_.set_head_persistent(recorder_.enabled());
  auto state = recorder_.Load();
  if (!state.ok()) {
    LUMEN_LOG(ERROR) << "head: cannot read its persisted state (" << recorder_.Describe()
                     << "): " << state.status().message();
    TellStarter(absl::StrCat("error cannot read the head's persisted state (",
                             recorder_.Describe(), "): ", state.status().message(), "\n"));
    return false;
  }
  if (!recorder_.enabled()) {
    LUMEN_LOG(INFO) << "head: persistence is off; nodes and drivers stop if this head is lost";
    return true;
  }
  LUMEN_LOG(INFO) << "head: persisting its tables in a " << recorder_.Describe();
  size_t restored = 0, refused = 0;
  auto count = [&](bool ok) { ok ? ++restored : ++refused; };
  for (const auto& [key, value] : (*state)[HeadTable::kDeadNodes]) {
    nodes_.RestoreDead(IdFrom<NodeId>(BytesOf(key)));
    ++restored;
  }
  // Restored nodes count as alive, without a connection, for the grace: they
  // re-register on their own connection (same id) or are declared dead.
  const auto alive_until =
      std::chrono::steady_clock::now() +
      std::max<std::chrono::milliseconds>(options_.timeouts.restored_node_grace,
                                          nodes_.silence_limit());
  for (const auto& [key, value] : (*state)[HeadTable::kNodes]) {
    count(nodes_.Restore(value, alive_until));
  }
  std::vector<std::pair<uint64_t, std::string>> ended;
  for (const auto& [key, value] : (*state)[HeadTable::kEndedJobs]) {
    uint64_t n = 0;
    for (size_t i = 0; i < 8 && i < value.size(); ++i) {
      n |= static_cast<uint64_t>(static_cast<uint8_t>(value[i])) << (8 * i);
    }
    ended.emplace_back(n, key);
  }
  std::sort(ended.begin(), ended.end());
  for (const auto& [n, key] : ended) {
    jobs_.End(IdFrom<JobId>(BytesOf(key)));
    ended_jobs_recorded_ = std::max(ended_jobs_recorded_, n);
    ++restored;
  }
  for (const auto& [key, value] : (*state)[HeadTable::kNamedActors]) {
    count(names_.Restore(key, value));
  }
  for (const auto& [key, value] : (*state)[HeadTable::kPlacementGroups]) {
    count(groups_.Restore(value));
  }
  for (const auto& [key, value] : (*state)[HeadTable::kKv]) {
    auto [ns, k] = HeadStateRecorder::SplitKey(key);
    count(kv_.Restore(ns, k, value));
  }
  if (restored + refused > 0) {
    LUMEN_LOG(INFO) << "head: restored " << restored << " entries (" << nodes_.size()
                    << " nodes, " << names_.directory().size() << " named actors, "
                    << groups_.manager().live_groups() << " placement groups)"
                    << (refused > 0 ? absl::StrCat("; ", refused, " malformed or refused entries skipped") : "");
  }
  return true;
}

void HeadService::OnClose(Connection& conn, const absl::Status& why) {
  loop_thread_.Check("HeadService");
  if (why.code() == absl::StatusCode::kInvalidArgument ||
      why.code() == absl::StatusCode::kResourceExhausted ||
      why.code() == absl::StatusCode::kPermissionDenied ||
      why.code() == absl::StatusCode::kDeadlineExceeded ||
      why.code() == absl::StatusCode::kDataLoss) {
    LogRejectedConnection("head", conn.peer(), why);
  }
  // A node's link closing is not its death: it has the health checks' grace
  // to register again (NodeTable::DropConnection); the others see it without
  // free resources meanwhile.
  const auto disconnected = nodes_.DropConnection(conn.id(), std::chrono::steady_clock::now());
  for (const NodeId& id : disconnected) {
    // A daemon that died closed its connection too: found gone, it is dead now.
    if (const NodeTable::Node* node = nodes_.Find(id)) {
      probe_.Probe(id, node->address,
                   [this](const NodeId& gone) { OnNodesDead(nodes_.DeclareGone(gone)); });
    }
  }
  if (!disconnected.empty()) views_.Broadcast();
  kv_.DropConnection(conn.id());
  groups_.DropConnection(conn.id());
  // The connection may still be on the stack: release it after this handler.
  auto it = conns_.find(conn.id());
  if (it == conns_.end()) return;
  std::shared_ptr<Connection> keep = std::move(it->second);
  conns_.erase(it);
  lumen::ReleaseLater(io_, "head.release_closed_connection", std::move(keep));
}

}  // namespace

HeadLimits HeadLimits::FromEnv() {
  HeadLimits limits;
  auto read = [](const char* name, size_t* value) {
    const char* v = std::getenv(name);
    uint64_t parsed = 0;
    if (v != nullptr && absl::SimpleAtoi(v, &parsed)) *value = static_cast<size_t>(parsed);
  };
  read("LUMEN_MAX_NAMED_ACTORS", &limits.max_named_actors);
  read("LUMEN_MAX_PLACEMENT_GROUPS", &limits.max_placement_groups);
  read("LUMEN_MAX_BUNDLES_PER_GROUP", &limits.max_bundles_per_group);
  read("LUMEN_MAX_PARKED_REQUESTS", &limits.max_parked_requests_per_connection);
  read("LUMEN_PLACEMENT_GROUP_ONE_STEP", &limits.placement_group_one_step);
  return limits;
}

void ReadPersistenceFromEnv(HeadOptions* options) {
  if (const char* v = std::getenv("LUMEN_HEAD_PERSISTENCE"); v != nullptr && *v != '\0') {
    options->persistence = v;
  }
  if (const char* v = std::getenv("LUMEN_HEAD_EXTERNAL_STORAGE"); v != nullptr && *v != '\0') {
    options->external_storage = v;
  }
  if (const char* v = std::getenv("LUMEN_HEAD_STATE_DIR"); v != nullptr && *v != '\0') {
    options->state_dir = v;
  }
}

int RunHeadService(const HeadOptions& options) {
  HeadService head(options);
  return head.Run();
}

void ServeConnectionForTesting(const HeadOptions& options, int fd) {
  HeadService head(options);
  boost::asio::io_context& io = head.io();
  head.ServeUntilClosed(Socket(io, boost::asio::generic::stream_protocol(AF_UNIX, 0), fd));
}

}  // namespace lumen::head
