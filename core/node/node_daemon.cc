// NodeDaemon: the composition root of the node daemon and its frame dispatch.
// It owns the io_context, the listeners and every part (client registry,
// client sessions (hello, close, job end), worker pool, local lease manager,
// store server, pull manager, link to the head) and routes each client frame
// to the part that owns it.
//
// Threads: everything runs on the io thread (the one that calls Run).
#include "lumen/node/node_daemon.h"

#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio.hpp>
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "core/node/client_registry.h"
#include "core/node/client_sessions.h"
#include "core/node/cluster_state.h"
#include "core/node/gpu_monitor.h"
#include "core/node/head_link.h"
#include "core/node/lease_replies.h"
#include "core/node/local_lease_manager.h"
#include "core/node/memory_monitor.h"
#include "core/node/process_launcher.h"
#include "core/node/state_lister.h"
#include "core/node/store_report.h"
#include "core/node/recent_failures.h"
#include "core/node/task_event_buffer.h"
#include "core/node/worker_event_flush.h"
#include "core/node/worker_exit_log.h"
#include "core/node/worker_log_router.h"
#include "core/node/worker_pool.h"
#include "lumen/common/accept_retry.h"
#include "lumen/common/address.h"
#include "lumen/common/connection.h"
#include "lumen/common/head_client.h"
#include "lumen/common/ids.h"
#include "lumen/common/logging.h"
#include "lumen/common/process.h"
#include "lumen/common/proto_util.h"
#include "lumen/common/post.h"
#include "lumen/common/task_event_wire.h"
#include "lumen/objectstore/pull_manager.h"
#include "lumen/objectstore/store_server.h"
#include "lumen/objectstore/transfer.h"

namespace lumen::node {
namespace {

namespace asio = boost::asio;
using scheduler::ResourceSet;

// Lease requests one client may have queued or parked here (drivers keep a
// few per task shape in flight; this bounds a misbehaving one).
size_t MaxQueuedLeasesPerClient() {
  const char* v = std::getenv("LUMEN_MAX_QUEUED_LEASES_PER_CLIENT");
  size_t parsed = 0;
  return v != nullptr && absl::SimpleAtoi(v, &parsed) ? parsed : size_t{10000};
}

absl::Mutex testing_mu;
std::optional<NodeDaemonTesting> testing_override ABSL_GUARDED_BY(testing_mu);

class NodeDaemon {
 public:
  explicit NodeDaemon(const NodeDaemonOptions& options)
      : options_(options),
        node_id_(NodeId::Random()),
        cluster_(std::string(reinterpret_cast<const char*>(node_id_.data()), NodeId::kSize)),
        acceptor_(io_),
        signals_(io_, SIGTERM, SIGINT),
        child_signal_(io_, SIGCHLD),
        reap_timer_(io_),
        clients_(io_, {.require_token = !IsLoopbackHost(options.host)}),
        exits_(io_, options.timeouts.max_worker_exit_wait),
        lister_(io_, clients_, node_id_.Hex().substr(0, 12), options.timeouts.list_state_timeout) {}

  int Run();
 private:
  [[nodiscard]] absl::Status Setup();
  void AcceptLocal();
  void AcceptTcp();
  void StartClient(Socket socket);
  void OnFrame(Connection& conn, proto::Envelope::Reader msg);
  void OnLeaseRequest(Connection& conn, proto::Envelope::Reader msg);
  void OnStoreRequest(Connection& conn, proto::Envelope::Reader msg);
  void OnPull(Connection& conn, proto::Envelope::Reader msg);
  void OnGetWorkerExit(Connection& conn, proto::Envelope::Reader msg);
  // A driver's flush, or `lumen logs`.
  void OnWorkerLogs(Connection& conn, proto::Envelope::Reader msg);
  // `lumen timeline`: every task event kept here, this daemon's own included.
  void SendTaskEvents(Connection& conn, uint64_t request_id);
  void OnClusterView(proto::ClusterView::Reader view);
  [[nodiscard]] absl::Status OnBundles(proto::Envelope::Reader msg);
  void ReapChildren();
  void ReapIdleWorkersLater();
  void FillStats(proto::NodeStats::Builder stats);
  void Shutdown(const std::string& why);
  void WatchSignals();
  // Tells the process that started us where we serve (once).
  void ReportReady();
  void WatchChildren();

  NodeDaemonOptions options_;
  NodeId node_id_;
  asio::io_context io_;
  ClusterState cluster_;
  asio::local::stream_protocol::acceptor acceptor_;
  std::unique_ptr<asio::ip::tcp::acceptor> tcp_acceptor_;
  // Keep the accept loops alive through EMFILE and the like (io thread only).
  AcceptRetry local_accept_retry_{io_, "node daemon unix listener"};
  AcceptRetry tcp_accept_retry_{io_, "node daemon tcp listener"};
  std::string address_;  // "host:port;/unix/path"
  asio::signal_set signals_;
  asio::signal_set child_signal_;
  asio::steady_timer reap_timer_;
  std::optional<asio::posix::stream_descriptor> parent_watch_;
  std::string socket_path_;
  bool shutting_down_ = false;

  ClientRegistry clients_;
  WorkerExitLog exits_;
  std::unique_ptr<WorkerLogRouter> worker_logs_;
  std::unique_ptr<WorkerEventFlush> event_flush_;
  std::unique_ptr<WorkerForkServer> fork_server_;  // null: LUMEN_WORKER_FORK_SERVER=0
  std::unique_ptr<PosixProcessLauncher> launcher_;
  std::unique_ptr<WorkerPool> pool_;
  std::unique_ptr<LeaseReplies> lease_replies_;
  std::unique_ptr<LocalLeaseManager> leases_;
  std::unique_ptr<MemoryMonitor> memory_;  // kills workers over the memory budget
  std::unique_ptr<GpuMonitor> gpus_;       // NVML samples for the reports (none without NVML)
  std::unique_ptr<objectstore::StoreServer> store_;
  std::unique_ptr<objectstore::TransferServer> transfer_server_;
  std::unique_ptr<objectstore::TransferClient> transfer_client_;
  std::unique_ptr<objectstore::PullManager> pulls_;
  std::unique_ptr<HeadLink> head_;
  std::unique_ptr<RemoteOwners> remote_owners_;  // tells sessions_ of dead remote owners
  std::unique_ptr<ClientSessions> sessions_;  // uses the parts above
  StateLister lister_;
  TaskEventBuffer task_events_;
  RecentFailures failures_;  // for the head's dashboard
};

absl::Status NodeDaemon::Setup() {
  // Beyond loopback every hello must carry the cluster's token: without one to
  // compare with, anyone who reaches the port would be let in.
  if (!IsLoopbackHost(options_.host) && runtime::HeadToken().empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "it would listen on ", options_.host,
        " without a cluster token (pass --token or LUMEN_TOKEN, or listen on loopback)"));
  }
  std::filesystem::create_directories(options_.session_dir + "/sockets");
  socket_path_ = options_.session_dir + "/sockets/node-" + node_id_.Hex().substr(0, 12) + ".sock";

  std::map<std::string, double> totals = options_.resources;
  totals["object_store_memory"] = static_cast<double>(options_.object_store_bytes);
  auto total = ResourceSet::FromMap(totals);
  if (!total.ok()) return total.status();

  auto store = objectstore::StoreServer::Create(objectstore::StoreOptions::FromEnv(
      options_.object_store_bytes,
      options_.spill_dir.empty() ? options_.session_dir : options_.spill_dir, &io_));
  if (!store.ok()) return store.status();
  store_ = std::move(*store);

  boost::system::error_code ec;
  ::unlink(socket_path_.c_str());
  acceptor_.open(asio::local::stream_protocol(), ec);
  if (!ec) SetCloseOnExec(acceptor_.native_handle());
  if (!ec) acceptor_.bind(asio::local::stream_protocol::endpoint(socket_path_), ec);
  if (!ec) acceptor_.listen(512, ec);
  if (ec) return absl::UnavailableError(absl::StrCat("cannot listen on ", socket_path_, ": ", ec.message()));
  // LUMEN_NODE_PORT: a fixed TCP port (default: any free one);
  // LUMEN_NODE_ADVERTISE_ADDRESS: the host:port others reach us at instead
  // (a forwarder in front of us; then over TCP only), as Ray's
  // --node-ip-address. Tests put a fault proxy there.
  const char* port = std::getenv("LUMEN_NODE_PORT");
  auto tcp = ListenTcp(io_, options_.host, port != nullptr ? std::atoi(port) : 0);
  if (!tcp.ok()) return tcp.status();
  tcp_acceptor_ = std::move(*tcp);
  address_ = FormatAddress(
      {absl::StrCat(options_.host, ":", tcp_acceptor_->local_endpoint().port()), socket_path_});
  if (const char* advertised = std::getenv("LUMEN_NODE_ADVERTISE_ADDRESS");
      advertised != nullptr && *advertised != 0) {
    address_ = advertised;
  }

  event_flush_ = std::make_unique<WorkerEventFlush>(io_, clients_,
                                                    options_.timeouts.exit_flush_timeout / 2);
  worker_logs_ = std::make_unique<WorkerLogRouter>(
      io_, clients_, node_id_, WorkerLogRouterOptions{.log_dir = options_.session_dir + "/logs"});
  PosixLauncherOptions launcher_options{
      socket_path_, options_.host, options_.session_dir, options_.head_address,
      [this](pid_t pid, const JobId& job, int out, int err) {
        worker_logs_->AddWorker(pid, job, out, err);
      }};
  if (WorkerForkServer::EnabledByEnv()) {
    fork_server_ = std::make_unique<WorkerForkServer>(
        WorkerForkServerOptions{.template_env = WorkerEnvironment(launcher_options, {}),
                                .reply_timeout = options_.timeouts.fork_server_reply_timeout});
    launcher_options.forker = fork_server_.get();
  }
  launcher_ = std::make_unique<PosixProcessLauncher>(std::move(launcher_options));
  int pool_size = options_.prestart_workers >= 0 ? options_.prestart_workers
                                                 : static_cast<int>(total->Get(scheduler::kCPU));
  pool_ = std::make_unique<WorkerPool>(WorkerPoolOptions{
      .launcher = launcher_.get(),
      .pool_size = pool_size,
      .idle_timeout = options_.timeouts.worker_idle_timeout});
  lease_replies_ = std::make_unique<LeaseReplies>(clients_, cluster_, node_id_);
  leases_ = std::make_unique<LocalLeaseManager>(LocalLeaseManagerOptions{
      .total = *total,
      .pool = pool_.get(),
      .clients = lease_replies_.get(),
      .cluster = &cluster_,
      .max_queued_per_client = MaxQueuedLeasesPerClient(),
      .post = [this](const char* name, std::function<void()> task) {
        lumen::Post(io_, name, std::move(task));
      },
      .testing_refuse_prepares = options_.testing.refuse_prepares});

  memory_ = std::make_unique<MemoryMonitor>(
      io_,
      MemoryMonitorOptions{.budget_bytes = options_.memory_budget_bytes,
                           .refresh_period = options_.memory_monitor_period,
                           .backoff = options_.memory_kill_backoff},
      MemoryMonitor::Hooks{
          .sample =
              [this] {
                std::vector<WorkerMemory> out;
                out.reserve(pool_->workers().size());
                for (const auto& [id, w] : pool_->workers()) {
                  out.push_back(WorkerMemory{id, w.pid, MemoryMonitor::ReadAnonRss(w.pid),
                                             w.lease_id != 0, w.lease_id,
                                             leases_->IsRetriable(w.lease_id)});
                }
                return out;
              },
          .kill =
              [this](const WorkerMemory& victim, const std::string& reason) {
                if (Worker* w = pool_->Find(victim.worker)) w->kill_reason = reason;
                launcher_->Kill(victim.pid);
              },
          .pause_grants =
              [this](bool paused) {
                leases_->set_grants_paused(paused);
                if (!paused) leases_->Dispatch();
              }});

  gpus_ = std::make_unique<GpuMonitor>(GpuMonitorOptions::FromEnv(options_.timeouts.report_period));

  // Other nodes pull copies of our objects through the transfer server.
  std::string token = IsLoopbackHost(options_.host) ? "" : runtime::HeadToken();
  transfer_server_ = std::make_unique<objectstore::TransferServer>(
      io_, [this](const ObjectId& id) { return store_->ServeOut(id); },
      [this](const ObjectId& id) { store_->EndServeOut(id); }, token);
  if (auto s = transfer_server_->Listen(options_.host, 0); !s.ok()) return s;
  transfer_client_ = std::make_unique<objectstore::TransferClient>(io_, runtime::HeadToken());
  pulls_ = std::make_unique<objectstore::PullManager>(
      *store_, *transfer_client_, [this](const std::string& node) -> absl::StatusOr<std::string> {
        std::string address = cluster_.TransferAddressOf(node);
        const scheduler::NodeResources* source = cluster_.view().Find(node);
        if (!address.empty() && source != nullptr && source->alive) return address;
        return absl::UnavailableError(absl::StrCat(
            "the only copy was on node ", NodeId::FromBinary(node).Hex(),
            source == nullptr ? ", which is unknown" : ", which is dead"));
      },
      [this](std::chrono::milliseconds delay, std::function<void()> fn) {
        auto timer = std::make_shared<asio::steady_timer>(io_, delay);  // lives until it fires
        timer->async_wait([timer, fn = std::move(fn)](boost::system::error_code ec) {
          if (!ec) fn();
        });
      },
      objectstore::PullManager::Retry{.delay = options_.timeouts.pull_retry_delay,
                                      .limit = options_.timeouts.pull_retry_limit});
  cluster_.view().Upsert(cluster_.local_key(),
                         scheduler::NodeResources{*total, leases_->resources().available(), true});
  if (!options_.head_address.empty()) {
    head_ = std::make_unique<HeadLink>(
        io_, HeadLinkOptions{options_.head_address, options_.timeouts, options_.parent_fd},
        HeadLinkCallbacks{
            .fill_stats = [this](proto::NodeStats::Builder stats) { FillStats(stats); },
            .on_cluster_view = [this](proto::ClusterView::Reader view) { OnClusterView(view); },
            .on_bundles = [this](proto::Envelope::Reader msg) { return OnBundles(msg); },
            .after_bundles =
                [this](proto::Envelope::Reader msg) {
                  if (!msg.isCancelBundles()) leases_->ReplayParked();  // committed ones may fit
                  leases_->Dispatch();
                },
            .on_marked_dead = [this] { Shutdown("declared dead by the head"); },
            .on_head_lost =
                [this](const absl::Status& why) {
                  LUMEN_LOG(ERROR) << why.message();
                  Shutdown(std::string(why.message()));
                },
            .after_first_attempt = [this] { ReportReady(); }});
  }
  remote_owners_ = std::make_unique<RemoteOwners>(RemoteOwners::Options{
      .io = &io_, .session_dir = options_.session_dir,
      .probe_period = options_.timeouts.owner_probe_period,
      .connect_timeout = options_.timeouts.connect_timeout,
      .gone = [this](const RemoteOwners::Gone& gone) { sessions_->OnRemoteOwnerGone(gone); }});
  sessions_ = std::make_unique<ClientSessions>(ClientSessionsOptions{
      .io = &io_, .clients = &clients_, .cluster = &cluster_, .pool = pool_.get(),
      .launcher = launcher_.get(), .leases = leases_.get(), .worker_logs = worker_logs_.get(),
      .store = store_.get(), .head = head_.get(), .remote_owners = remote_owners_.get(),
      .node_id = node_id_,
      .session_dir = options_.session_dir, .host = options_.host, .address = address_});
  return absl::OkStatus();
}

int NodeDaemon::Run() {
  logging::SetProcessTag("node");
  if (auto s = Setup(); !s.ok()) {
    LUMEN_LOG(ERROR) << "node daemon cannot start: " << s;
    if (options_.ready_fd >= 0) {
      std::string line = absl::StrCat("error ", s.message(), "\n");
      if (::write(options_.ready_fd, line.data(), line.size()) < 0) {
        LUMEN_LOG(ERROR) << "cannot tell the starter: " << std::strerror(errno);
      }
    }
    return 1;
  }
  WatchSignals();
  AcceptLocal();
  AcceptTcp();
  ReapIdleWorkersLater();
  memory_->Start();
  if (options_.parent_fd >= 0) {
    parent_watch_.emplace(io_, options_.parent_fd);
    auto buf = std::make_shared<char>();
    parent_watch_->async_read_some(asio::buffer(buf.get(), 1),
                                   [this, buf](const boost::system::error_code&, size_t) {
                                     Shutdown("the driver that started this cluster exited");
                                   });
  }
  if (head_) {
    head_->Start();  // ready once the head was first tried (after_first_attempt)
  } else {
    ReportReady();
  }
  LUMEN_LOG(INFO) << "node " << node_id_.Hex().substr(0, 12) << " serving on " << address_
                  << " with " << leases_->resources().total().ToString();
  io_.run();
  return 0;
}

void NodeDaemon::ReportReady() {
  if (options_.ready_fd < 0) return;
  std::string line = absl::StrCat("ready ", address_, "\n");
  if (::write(options_.ready_fd, line.data(), line.size()) < 0) {
    LUMEN_LOG(ERROR) << "cannot tell the starter: " << std::strerror(errno);
  }
  ::close(options_.ready_fd);
  options_.ready_fd = -1;
}

void NodeDaemon::WatchSignals() {
  signals_.async_wait([this](const boost::system::error_code& ec, int sig) {
    if (!ec) Shutdown(absl::StrCat("signal ", sig));
  });
  WatchChildren();
}

void NodeDaemon::WatchChildren() {
  child_signal_.async_wait([this](const boost::system::error_code& ec, int) {
    if (ec || shutting_down_) return;
    ReapChildren();
    WatchChildren();
  });
}

void NodeDaemon::AcceptLocal() {
  acceptor_.async_accept([this](const boost::system::error_code& ec,
                                asio::local::stream_protocol::socket socket) {
    if (!local_accept_retry_.Accepted(ec, acceptor_.is_open(), [this] { AcceptLocal(); })) return;
    int fd = socket.release();
    StartClient(Socket(io_, asio::generic::stream_protocol(AF_UNIX, 0), fd));
    AcceptLocal();
  });
}

void NodeDaemon::AcceptTcp() {
  tcp_acceptor_->async_accept([this](const boost::system::error_code& ec,
                                     asio::ip::tcp::socket socket) {
    if (!tcp_accept_retry_.Accepted(ec, tcp_acceptor_->is_open(), [this] { AcceptTcp(); })) return;
    StartClient(AdoptTcp(io_, std::move(socket)));
    AcceptTcp();
  });
}

void NodeDaemon::StartClient(Socket socket) {
  auto conn = clients_.Admit(std::move(socket));
  if (!conn) return;
  conn->Start([this](Connection& c, proto::Envelope::Reader m) { OnFrame(c, m); },
              [this](Connection& c, const absl::Status& why) { sessions_->OnClose(c, why); });
}

void NodeDaemon::OnFrame(Connection& conn, proto::Envelope::Reader msg) {
  Client& client = ClientRegistry::Info(conn);
  if (!client.hello_done) {
    sessions_->OnFirstFrame(conn, msg);
    return;
  }
  switch (msg.which()) {
    case proto::Envelope::REQUEST_LEASE:  // a resent one is answered by its first's reply
      if (!lease_replies_->keyed().Repeat(conn, msg, /*bound=*/true)) OnLeaseRequest(conn, msg);
      return;
    case proto::Envelope::PULL_OBJECT:
      OnPull(conn, msg);
      return;
    case proto::Envelope::LIST_STATE:
      lister_.List(conn, msg.getRequestId(), msg.getListState().cStr(),
                   StoreMemoryRows(*store_, msg.getListState().cStr()));
      return;
    case proto::Envelope::STATE_ROWS:
      lister_.OnRows(msg);
      return;
    case proto::Envelope::RETURN_LEASE:
      leases_->ReturnLease(conn.id(), msg.getReturnLease(), /*kill=*/false);
      return;
    case proto::Envelope::KILL_LEASE:
      // The holder lost its connection to the worker: it must not be reused.
      leases_->ReturnLease(conn.id(), msg.getKillLease(), /*kill=*/true);
      return;
    case proto::Envelope::WORKER_BLOCKED:
      if (client.role == proto::Role::WORKER) leases_->OnWorkerBlocked(client.worker);
      return;
    case proto::Envelope::WORKER_UNBLOCKED:
      if (client.role == proto::Role::WORKER) leases_->OnWorkerUnblocked(client.worker);
      return;
    case proto::Envelope::GET_WORKER_EXIT:
      OnGetWorkerExit(conn, msg);
      return;
    case proto::Envelope::TASK_EVENTS:
      if (client.local()) {
        std::vector<TaskEvent> failed;
        absl::Status added = task_events_.AddBatch(msg.getTaskEvents(), &failed);
        if (!added.ok()) LUMEN_LOG(WARNING) << "task events of a " << (client.role == proto::Role::WORKER ? "worker" : "driver") << " refused: " << added;
        failures_.OnTaskEvents(failed);
        // A worker answering a driver's flush (WorkerEventFlush).
        if (client.role == proto::Role::WORKER && msg.getRequestId() != 0) {
          event_flush_->OnAnswer(msg.getRequestId());
        }
      }
      return;
    case proto::Envelope::GET_TASK_EVENTS:
      SendTaskEvents(conn, msg.getRequestId());
      return;
    case proto::Envelope::WORKER_LOGS:
      OnWorkerLogs(conn, msg);
      return;
    case proto::Envelope::GET_NODE_STATS: {
      OutMessage out;
      auto env = out.Init();
      env.setRequestId(msg.getRequestId());
      auto stats = env.initNodeStats();
      FillStats(stats);
      // Only in this answer (the dashboard asks), not in every report.
      failures_.Fill(stats.initDashboard());
      conn.Send(out.builder());
      return;
    }
    default:
      OnStoreRequest(conn, msg);
  }
}

void NodeDaemon::OnLeaseRequest(Connection& conn, proto::Envelope::Reader msg) {
  const Client& client = ClientRegistry::Info(conn);
  auto req = msg.getRequestLease();
  std::map<std::string, double> wanted = ReadResources(req.getResources());
  std::map<std::string, double> placement = ReadResources(req.getPlacement());
  for (const auto& [name, qty] : wanted) placement[name] = std::max(placement[name], qty);
  auto resources = ResourceSet::FromMap(wanted);
  auto placement_set = ResourceSet::FromMap(placement);
  absl::Status valid = !resources.ok() ? resources.status() : placement_set.status();
  if (valid.ok()) valid = scheduler::GpuAssigner::Validate(placement[std::string(scheduler::kGPU)]);
  bool can_lease = client.may_lease() && pool_->FindJob(client.job) != nullptr;
  if (!can_lease || !valid.ok()) {
    lease_replies_->Refuse(conn.id(), msg.getRequestId(),
                           !can_lease ? std::string("only a driver or worker of a live job can lease")
                                      : std::string(valid.message()));
    return;
  }
  LeaseRequest request;
  request.client = conn.id();
  request.request_id = msg.getRequestId();
  request.job = client.job;
  request.resources = *resources;
  request.placement = *placement_set;
  request.placement_map = std::move(placement);
  request.strategy.kind = static_cast<scheduler::StrategyKind>(req.getStrategy());
  request.strategy.node_id = StringOf(req.getAffinityNode());
  request.strategy.soft = req.getAffinitySoft();
  request.group = StringOf(req.getPlacementGroup());
  request.bundle_index = req.getBundleIndex();
  request.grant_or_reject = req.getGrantOrReject();
  request.actor = req.getActor();
  request.detached = req.getDetached();
  request.retriable = req.getRetriable();
  request.name = req.getName().cStr();
  leases_->Submit(std::move(request));
}

void NodeDaemon::OnStoreRequest(Connection& conn, proto::Envelope::Reader msg) {
  const Client& client = ClientRegistry::Info(conn);
  objectstore::StoreCaller caller{conn.id(), client.job, client.local(), false};
  if (client.role == proto::Role::WORKER) {
    // A detached actor's objects belong to no job.
    Worker* w = pool_->Find(client.worker);
    caller.detached = w != nullptr && leases_->IsDetached(*w);
  }
  if (msg.isStoreCreate()) {
    // Who owns the new object: a Put's creator is its owner; a task result
    // belongs to whoever holds the lease its worker runs under (an actor
    // call's result, to a caller the daemon does not know: it goes with its
    // job). Its primary copy goes when the owner's connection closes.
    ObjectId id = IdFrom<ObjectId>(msg.getStoreCreate().getObjectId());
    uint32_t index;  // ObjectId::ForTaskReturn's: 0 for a Put
    std::memcpy(&index, id.data() + TaskId::kSize, sizeof(index));
    if (index == 0) {
      caller.owner = client.owner_key;
    } else if (client.role == proto::Role::WORKER) {
      // The holder's key (a remote owner's outlives its connection).
      Connection* holder = clients_.Find(leases_->TaskLeaseHolder(client.worker));
      if (holder != nullptr) caller.owner = ClientRegistry::Info(*holder).owner_key;
    }
  }
  // A create waiting for room, or a get of a spilled object, answers later.
  absl::Status handled = store_->Handle(
      caller, msg,
      [weak = conn.weak_from_this(), request_id = msg.getRequestId()](
          const objectstore::StoreReply& reply) {
        auto c = weak.lock();
        if (!c || c->closed()) return;
        OutMessage out;
        objectstore::FillStoreReply(out.Init(), request_id, reply);
        c->Send(out.builder());
      });
  if (!handled.ok()) conn.Close(handled);
}

void NodeDaemon::OnPull(Connection& conn, proto::Envelope::Reader msg) {
  auto pull = msg.getPullObject();
  auto answer = [weak = conn.weak_from_this(), request_id = msg.getRequestId()](
                    const absl::Status& status) {
    auto c = weak.lock();
    if (!c || c->closed()) return;
    OutMessage out;
    objectstore::FillStoreReply(out.Init(), request_id, objectstore::ReplyOf(status));
    c->Send(out.builder());
  };
  if (!ClientRegistry::Info(conn).local()) {
    answer(absl::PermissionDeniedError("only local drivers and workers pull objects"));
    return;
  }
  pulls_->Pull(IdFrom<ObjectId>(pull.getObjectId()), StringOf(pull.getNodeId()), pull.getSize(),
               IdFrom<JobId>(pull.getJobId()), std::move(answer));
}

void NodeDaemon::OnGetWorkerExit(Connection& conn, proto::Envelope::Reader msg) {
  const Client& client = ClientRegistry::Info(conn);
  auto query = msg.getGetWorkerExit();
  WorkerId id = IdFrom<WorkerId>(query.getWorkerId());
  auto answer = [this, weak = conn.weak_from_this(), request_id = msg.getRequestId()](
                    const WorkerExit* exit) {
    auto c = weak.lock();
    if (!c || c->closed()) return;
    OutMessage out;
    auto env = out.Init();
    env.setRequestId(request_id);
    FillWorkerExitInfo(node_id_, exit, env.initWorkerExit());
    c->Send(out.builder());
  };
  if (!client.may_lease()) {
    answer(nullptr);
    return;
  }
  Worker* w = pool_->Find(id);
  exits_.Ask(id, client.job, conn.id(), w != nullptr && w->job == client.job,
             std::chrono::milliseconds(query.getTimeoutMs()), std::move(answer));
}

void NodeDaemon::OnWorkerLogs(Connection& conn, proto::Envelope::Reader msg) {
  const Client& client = ClientRegistry::Info(conn);
  auto query = msg.getWorkerLogs().getQuery();
  OutMessage out;
  auto env = out.Init();
  env.setRequestId(msg.getRequestId());
  auto batch = env.initWorkerLogs();
  batch.setNodeId(DataOf(node_id_));
  if (query.getFlush()) {
    // A driver about to stop: its workers' task events come in first, then
    // what they wrote so far goes to it, then the answer.
    if (!client.may_lease()) {
      conn.Send(out.builder());
      return;
    }
    std::vector<uint64_t> workers;
    for (const auto& [id, w] : pool_->workers()) {
      if (w.job == client.job && w.conn_id != 0) workers.push_back(w.conn_id);
    }
    std::string frame;
    AppendFrame(out.builder(), &frame);
    event_flush_->Start(workers, [this, job = client.job, weak = conn.weak_from_this(),
                                  frame = std::move(frame)] {
      worker_logs_->FlushJob(job);
      if (auto c = weak.lock(); c && !c->closed()) c->SendFramed(frame);
    });
    return;
  }
  if (client.role != proto::Role::CLI) return;
  worker_logs_->AnswerQuery(query, batch);
  conn.Send(out.builder());
}

void NodeDaemon::OnClusterView(proto::ClusterView::Reader view) {
  ClusterState::Changes changes = cluster_.Apply(view);
  for (const std::string& node : changes.died) {
    // Copies from it will not finish: tell their readers now. What its
    // processes own here goes (they are given up on, even if still running).
    pulls_->OnNodeDied(node, absl::StrCat("the only copy was on node ",
                                          NodeId::FromBinary(node).Hex(), ", which died"));
    remote_owners_->NodeDied(node);
    // Work our clients run there is lost: tell them, so they retry it.
    clients_.ForEachLocalProcess([&](Connection& process) {
      OutMessage out;
      out.Init().setMarkNodeDead(BytesOf(node));
      process.Send(out.builder());
    });
  }
  for (const JobId& job : changes.ended_jobs) sessions_->EndJob(job);
  for (const std::string& group : changes.removed_groups) leases_->RemoveGroup(group);
  leases_->ReplayParked();
  leases_->Dispatch();
}

absl::Status NodeDaemon::OnBundles(proto::Envelope::Reader msg) {
  proto::BundleBatch::Reader batch = msg.isPrepareBundles()  ? msg.getPrepareBundles()
                                     : msg.isCommitBundles() ? msg.getCommitBundles()
                                                             : msg.getCancelBundles();
  std::string group = StringOf(batch.getGroupId());
  if (msg.isPrepareBundles()) {
    std::vector<std::pair<int, ResourceSet>> bundles;
    for (auto b : batch.getBundles()) {
      auto need = ResourceSet::FromMap(ReadResources(b.getResources()));
      if (!need.ok()) return need.status();
      bundles.emplace_back(b.getIndex(), *need);
    }
    return leases_->PrepareBundles(group, bundles, /*commit=*/batch.getCommit());
  }
  std::vector<int> indices;
  for (auto b : batch.getBundles()) indices.push_back(b.getIndex());
  if (msg.isCommitBundles()) return leases_->CommitBundles(group, indices);
  leases_->CancelBundles(group, indices);
  return absl::OkStatus();
}

void NodeDaemon::ReapChildren() {
  for (const ProcessExit& exit : launcher_->Reap()) {
    std::optional<WorkerPool::Gone> gone = pool_->OnProcessExit(exit);
    if (!gone) continue;
    std::string why = gone->exit.cause;
    failures_.OnWorkerExit(gone->worker.kill_reason, gone->exit);
    exits_.Record(gone->worker.id, gone->exit);
    leases_->OnWorkerGone(gone->worker, gone->job_start_failed, why);
    if (Connection* conn = clients_.Find(gone->worker.conn_id)) {
      conn->Close(absl::CancelledError("worker exited"));
    }
    if (!gone->worker.address.empty()) {
      ::unlink(ParseAddress(gone->worker.address).unix_path.c_str());
    }
  }
  leases_->Dispatch();
}

void NodeDaemon::ReapIdleWorkersLater() {
  pool_->ReapIdle();
  reap_timer_.expires_after(std::min(options_.timeouts.worker_idle_timeout,
                                     options_.timeouts.worker_reap_period));
  reap_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (!ec && !shutting_down_) ReapIdleWorkersLater();
  });
}

void NodeDaemon::SendTaskEvents(Connection& conn, uint64_t request_id) {
  task_events_.AddOwnEvents();
  OutMessage out;
  auto env = out.Init();
  env.setRequestId(request_id);
  auto batch = env.initTaskEvents();
  batch.setNodeId(DataOf(node_id_));
  task_events_.FillBatch(batch);
  conn.Send(out.builder());
}

void NodeDaemon::FillStats(proto::NodeStats::Builder stats) {
  task_events_.AddOwnEvents();
  FillTaskTotals(task_events_.totals(), stats.initTaskTotals());
  stats.setNodeId(DataOf(node_id_));
  stats.setAddress(address_);
  stats.setTransferAddress(transfer_server_ ? transfer_server_->address() : "");
  stats.setHostAddress(options_.host);
  std::vector<JobId> drivers;
  for (const auto& [job_id, job] : pool_->jobs()) {
    if (!job.remote && job.driver_conn != 0) drivers.push_back(job_id);
  }
  auto driver_list = stats.initDrivers(drivers.size());
  for (size_t d = 0; d < drivers.size(); ++d) driver_list.set(d, DataOf(drivers[d]));
  char host[256] = {0};
  ::gethostname(host, sizeof(host) - 1);
  stats.setHostname(host);
  stats.setPid(::getpid());
  stats.setAlive(!shutting_down_);
  auto total = leases_->resources().total().ToMap();
  auto available = leases_->resources().available().ToMap();
  SetResources(stats.initTotal(total.size()), total);
  SetResources(stats.initAvailable(available.size()), available);
  auto store = store_->GetStats();
  stats.setStoreCapacity(store.capacity);
  stats.setStoreUsed(store.used);
  stats.setStoreObjects(store.num_objects);
  FillStoreSummary(*store_, stats.initStoreSummary());
  std::vector<GpuSample> gpus = gpus_->Latest();
  FillGpuStats(gpus, stats.initGpus(static_cast<unsigned>(gpus.size())));
  stats.setWorkers(pool_->num_workers());
  stats.setIdleWorkers(pool_->num_idle());
  stats.setQueuedLeases(leases_->num_queued());
  stats.setActiveLeases(leases_->num_leases());
  stats.setSessionDir(options_.session_dir);
  // Demand grouped by what it needs: no node can run it; waits for busy resources here.
  auto infeasible = leases_->InfeasibleDemand(), pending = leases_->PendingDemand();
  FillDemand(infeasible, stats.initInfeasible(infeasible.size()));
  FillDemand(pending, stats.initPending(pending.size()));
}

void NodeDaemon::Shutdown(const std::string& why) {
  if (shutting_down_) return;
  shutting_down_ = true;
  LUMEN_LOG(DEBUG) << "node daemon stopping: " << why;
  leases_->set_draining(true);
  if (memory_) memory_->Stop();
  if (head_) head_->Leave(node_id_);
  for (const auto& [wid, w] : pool_->workers()) launcher_->Kill(w.pid);
  // The loop ends here: waiting for the killed workers keeps their sockets
  // from outliving the daemon. One deadline for all of them, so that the
  // loop's last handler is bounded by worker_kill_wait however many there are.
  const auto kill_deadline = std::chrono::steady_clock::now() + options_.timeouts.worker_kill_wait;
  for (const auto& [wid, w] : pool_->workers()) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        kill_deadline - std::chrono::steady_clock::now());
    WaitForChildExit(w.pid, static_cast<int>(std::max<int64_t>(0, left.count())));
    if (!w.address.empty()) ::unlink(ParseAddress(w.address).unix_path.c_str());
  }
  if (fork_server_) fork_server_->Stop();
  worker_logs_->Stop();
  boost::system::error_code ignored;
  acceptor_.close(ignored);
  if (tcp_acceptor_) tcp_acceptor_->close(ignored);
  local_accept_retry_.Stop();
  tcp_accept_retry_.Stop();
  pulls_->Stop();
  store_->Stop();  // spill files go
  transfer_client_.reset();
  transfer_server_.reset();
  ::unlink(socket_path_.c_str());
  if (options_.remove_session_dir) std::filesystem::remove_all(options_.session_dir, ignored);
  io_.stop();
}

}  // namespace

void TEST_SetNodeDaemonTesting(const NodeDaemonTesting& testing) {
  absl::MutexLock lock(&testing_mu);
  testing_override = testing;
}

int RunNodeDaemon(const NodeDaemonOptions& options) {
  NodeDaemonOptions effective = options;
  {
    absl::MutexLock lock(&testing_mu);
    if (testing_override) effective.testing = *testing_override;
  }
  NodeDaemon daemon(effective);
  return daemon.Run();
}

}  // namespace lumen::node
