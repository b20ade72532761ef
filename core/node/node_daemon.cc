#include "core/runtime/node_daemon.h"

#include "lumen/common/head_client.h"

#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio.hpp>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <sstream>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "lumen/common/connection.h"
#include "lumen/common/proto_util.h"
#include "lumen/common/ids.h"
#include "lumen/common/logging.h"
#include "lumen/common/process.h"
#include "lumen/objectstore/fd_passing.h"
#include "lumen/objectstore/object_table.h"
#include "lumen/objectstore/shm_segment.h"
#include "lumen/objectstore/transfer.h"
#include "lumen/common/address.h"
#include "lumen/scheduler/cluster_view.h"
#include "lumen/scheduler/gpu_assigner.h"
#include "lumen/scheduler/resource_set.h"

namespace lumen::runtime {
namespace {

namespace asio = boost::asio;
using scheduler::LocalResourceManager;
using scheduler::ResourceSet;

// What a connected client is, learned from its hello.
// Counts, for one client, the lease requests it has queued or parked here:
// each queued or parked entry holds a slot for as long as it exists (copies
// too), so every way an entry leaves the queues gives its slot back.
class LeaseSlot {
 public:
  LeaseSlot() = default;
  explicit LeaseSlot(std::shared_ptr<size_t> count) : count_(std::move(count)) {
    if (count_) ++*count_;
  }
  LeaseSlot(const LeaseSlot& other) : LeaseSlot(other.count_) {}
  LeaseSlot(LeaseSlot&& other) noexcept : count_(std::move(other.count_)) {}
  LeaseSlot& operator=(LeaseSlot other) noexcept {
    Release();
    count_ = std::move(other.count_);
    return *this;
  }
  ~LeaseSlot() { Release(); }

 private:
  void Release() {
    if (count_) --*count_;
    count_.reset();
  }
  std::shared_ptr<size_t> count_;
};

struct Client {
  bool hello_done = false;
  // Lease requests of this client queued or parked here (see LeaseSlot).
  std::shared_ptr<size_t> queued_leases = std::make_shared<size_t>(0);
  proto::Role role = proto::Role::CLI;
  JobId job;
  WorkerId worker;
  bool is_driver = false;  // remoteOwner: the job's driver
};

// Store clients that are the daemon itself.
constexpr objectstore::ClientId kPullClient = ~0ull;       // copies being pulled in
constexpr objectstore::ClientId kTransferClient = ~0ull - 1;  // copies being served out

std::string Bytes(capnp::Data::Reader data) {
  return std::string(reinterpret_cast<const char*>(data.begin()), data.size());
}
capnp::Data::Reader DataOfString(const std::string& s) {
  return capnp::Data::Reader(reinterpret_cast<const uint8_t*>(s.data()), s.size());
}

// How a child process ended, in words: "killed by signal 11 (SIGSEGV)",
// "exited with code 0". `kill_reason`: why the daemon itself sent SIGKILL, if it did.
std::string DescribeExit(int status, const std::string& kill_reason) {
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    if (sig == SIGKILL) {
      if (!kill_reason.empty()) {
        return absl::StrCat("killed by SIGKILL from its node daemon (", kill_reason, ")");
      }
      return "killed by SIGKILL (possibly the out-of-memory killer)";
    }
    const char* abbrev = ::sigabbrev_np(sig);
    if (abbrev == nullptr) return absl::StrCat("killed by signal ", sig);
    return absl::StrCat("killed by signal ", sig, " (SIG", abbrev, ")");
  }
  if (WIFEXITED(status)) return absl::StrCat("exited with code ", WEXITSTATUS(status));
  return absl::StrCat("ended with wait status ", status);
}

// Whether a process is already on its way out (a zombie, or exiting: the
// kernel's PF_EXITING flag), e.g. killed by a signal whose socket closing we
// just saw. A signal sent now no longer changes how it ends.
bool ProcessExiting(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t comm_end = stat.rfind(')');
  if (comm_end == std::string::npos) return true;  // gone
  std::istringstream fields(stat.substr(comm_end + 1));
  std::string state;
  unsigned long ppid = 0, pgrp = 0, session = 0, tpgid = 0, flags = 0;
  long tty = 0;
  fields >> state >> ppid >> pgrp >> session >> tty >> tpgid >> flags;
  constexpr unsigned long kPfExiting = 0x4;
  return state == "Z" || state == "X" || (flags & kPfExiting) != 0;
}

class NodeDaemon {
 public:
  explicit NodeDaemon(const NodeDaemonOptions& options)
      : options_(options),
        node_id_(NodeId::Random()),
        acceptor_(io_),
        signals_(io_, SIGTERM, SIGINT),
        child_signal_(io_, SIGCHLD),
        report_timer_(io_),
        head_retry_timer_(io_) {}

  int Run();

 private:
  // Worker lifecycle: STARTING (spawned, not yet connected) -> IDLE (in its job's
  // pool) <-> LEASED (granted to a lease holder) -> gone (process exit).
  enum class WorkerState { kStarting, kIdle, kLeased };
  struct Worker {
    WorkerId id;
    pid_t pid = 0;
    JobId job;
    WorkerState state = WorkerState::kStarting;
    std::shared_ptr<Connection> conn;
    std::string address;
    uint64_t lease_id = 0;
    std::chrono::steady_clock::time_point idle_since;
    // Set when this daemon sends it SIGKILL: an exit by SIGKILL then names why.
    std::string kill_reason;
  };
  // How a worker process ended, kept a while for lease holders that ask
  // (getWorkerExit) after it was reaped.
  struct WorkerExit {
    JobId job;
    pid_t pid = 0;
    std::string cause;
    int signal = 0;
    int exit_code = -1;
  };
  // A getWorkerExit waiting for its worker to be reaped.
  struct ExitWaiter {
    std::weak_ptr<Connection> conn;
    uint64_t conn_id = 0;
    uint64_t request_id = 0;
    std::shared_ptr<asio::steady_timer> timer;
  };
  static constexpr size_t kMaxRecentExits = 1024;
  static constexpr size_t kMaxExitWaitersPerConnection = 256;
  static constexpr uint32_t kMaxExitWaitMs = 10000;
  struct Job {
    std::string exe_path;
    uint64_t driver_conn = 0;
    bool remote = false;  // its driver runs on another node: no prestarted pool
    std::deque<WorkerId> idle;
    int starting = 0;
    int failed_starts = 0;  // workers that exited before saying hello, in a row
  };
  static constexpr int kMaxFailedStarts = 5;
  struct Lease {
    WorkerId worker;
    ResourceSet resources;
    uint64_t holder_conn = 0;
    bool cpu_released = false;  // its worker is blocked in Get
    bool reclaim_asked = false;  // its holder was asked to return it when idle
    bool detached = false;       // a detached actor: outlives its holder and job
    std::vector<int> gpu_ids;    // devices it holds (whole or a share)
    std::string bundle;          // the placement group bundle it runs in, or ""
  };
  // A placement group bundle reserved on this node: prepared (resources taken
  // from the node), then committed (leases may use it).
  struct Bundle {
    std::unique_ptr<LocalResourceManager> resources;
    bool committed = false;
  };
  struct LeaseRequest {
    std::weak_ptr<Connection> conn;
    uint64_t request_id = 0;
    ResourceSet resources;  // held by the lease
    ResourceSet placement;  // must be free to grant it
    JobId job;
    bool detached = false;
    std::string group;   // placement group (binary id), or ""
    int bundle_index = -1;
    std::string name;
    LeaseSlot slot;  // counts against the client's queued-lease limit
  };
  // A lease request no node can run yet (infeasible), or whose placement
  // group is not placed yet; looked at again whenever the cluster changes.
  struct ParkedRequest {
    std::weak_ptr<Connection> conn;
    uint64_t request_id = 0;
    std::string frame;  // the original request, framed
    bool infeasible = false;  // no node fits it (else: its placement group is not placed yet)
    std::string name;
    std::map<std::string, double> resources;
    LeaseSlot slot;  // counts against the client's queued-lease limit
  };
  static std::string QueueKeyOf(const std::map<std::string, double>& r) {
    std::string key;
    for (const auto& [name, qty] : r) absl::StrAppend(&key, name, "=", qty, ";");
    return key;
  }

  absl::Status Setup();
  void AcceptNext();
  void AcceptTcp();
  void StartClient(Socket socket);
  void OnFrame(Connection& conn, proto::Envelope::Reader msg);
  void OnClose(Connection& conn, const absl::Status& why);
  void OnHello(Connection& conn, proto::Hello::Reader hello);
  void OnStoreRequest(Connection& conn, proto::Envelope::Reader msg);
  std::string LocalKey() const { return std::string(reinterpret_cast<const char*>(node_id_.data()), NodeId::kSize); }
  void OnLeaseRequest(Connection& conn, proto::Envelope::Reader msg, bool replayed);
  void Spillback(Connection& conn, uint64_t request_id, const std::string& node_id);
  // Not here after all: the requester starts over at its own node.
  void AskAgain(Connection& conn, uint64_t request_id);
  void Park(Connection& conn, proto::Envelope::Reader msg, bool replayed, bool infeasible,
            const std::string& name, const std::map<std::string, double>& resources);
  void ReplayParked();
  void OnHeadFrame(proto::Envelope::Reader msg);
  void OnClusterView(proto::ClusterView::Reader view);
  void OnBundles(proto::Envelope::Reader msg);
  void RemoveBundle(const std::string& key);
  void OnPull(Connection& conn, proto::Envelope::Reader msg);
  // `lumen list actors|tasks|objects`: asks every local driver and worker.
  struct Listing {
    std::weak_ptr<Connection> requester;
    uint64_t request_id = 0;
    int pending = 0;
    bool done = false;
    std::vector<std::vector<std::pair<std::string, std::string>>> rows;
    std::unique_ptr<asio::steady_timer> timer;
  };
  void OnListState(Connection& conn, proto::Envelope::Reader msg);
  void FinishListing(const std::shared_ptr<Listing>& listing);
  void FinishPull(const ObjectId& id, absl::Status status);
  void AnswerPull(const std::vector<std::pair<std::weak_ptr<Connection>, uint64_t>>& waiters,
                  const absl::Status& status);
  void EndJob(const JobId& job_id);
  LocalResourceManager* PoolFor(const std::string& bundle);
  std::string FindBundleWithRoom(const std::string& group, int index, const ResourceSet& need);
  void StartWorker(const JobId& job_id);
  void DispatchLeases();
  void ReleaseLease(uint64_t lease_id);
  void FreeLeaseResources(const Lease& lease);
  void AskHoldersForIdleLeases(uint64_t requester);
  void ReapChildren();
  void OnWorkerGone(Worker& worker, const std::string& why);
  // Sends SIGKILL to a worker and remembers why (for its exit cause).
  void KillWorker(Worker& worker, const char* reason);
  void OnGetWorkerExit(Connection& conn, proto::Envelope::Reader msg);
  void SendWorkerExit(Connection& conn, uint64_t request_id, const WorkerExit* exit);
  void RecordWorkerExit(const WorkerId& id, WorkerExit exit);
  void KillJobWorkers(const JobId& job_id);
  bool IsDetached(const Worker& w) const;
  void RefuseLease(Connection& conn, uint64_t request_id, const std::string& why);
  void FailJobLeaseRequests(const JobId& job_id, const std::string& why);
  void FillStats(proto::NodeStats::Builder stats);
  void ConnectHead();
  void RetryHeadLater();
  void ReportToHead();
  int PoolSize() const;
  void ReapIdleWorkers();
  void Shutdown(const std::string& why);
  void WatchSignals();
  void WatchChildren();

  NodeDaemonOptions options_;
  NodeId node_id_;
  asio::io_context io_;
  asio::local::stream_protocol::acceptor acceptor_;
  std::unique_ptr<asio::ip::tcp::acceptor> tcp_acceptor_;
  std::string address_;  // "host:port;/unix/path"
  asio::signal_set signals_;
  asio::signal_set child_signal_;
  asio::steady_timer report_timer_;
  asio::steady_timer reap_timer_{io_};
  asio::steady_timer head_retry_timer_;
  std::optional<asio::posix::stream_descriptor> parent_watch_;
  std::string socket_path_;
  std::unique_ptr<objectstore::ShmSegment> segment_;
  std::unique_ptr<objectstore::ObjectTable> store_;
  std::unique_ptr<LocalResourceManager> resources_;
  std::unique_ptr<scheduler::GpuAssigner> gpus_;
  std::shared_ptr<Connection> head_conn_;
  bool shutting_down_ = false;

  absl::flat_hash_map<uint64_t, std::shared_ptr<Connection>> clients_;
  // Connections awaiting their hello, capped per listener (TCP, Unix socket).
  HelloAdmission admission_{ServerLimits::FromEnv(), "node daemon"};
  HelloAdmission local_admission_{ServerLimits::FromEnv(), "node daemon"};
  // Lease requests one client may have queued or parked here (drivers keep a
  // few per task shape in flight; this bounds a misbehaving one).
  size_t max_queued_leases_per_client_ = [] {
    const char* v = std::getenv("LUMEN_MAX_QUEUED_LEASES_PER_CLIENT");
    size_t parsed = 0;
    return v != nullptr && absl::SimpleAtoi(v, &parsed) ? parsed : size_t{10000};
  }();
  absl::flat_hash_map<WorkerId, Worker> workers_;
  absl::flat_hash_map<pid_t, WorkerId> worker_pids_;
  // Recently reaped workers (at most kMaxRecentExits, oldest dropped first),
  // and the getWorkerExit requests waiting for a worker still running.
  absl::flat_hash_map<WorkerId, WorkerExit> recent_exits_;
  std::deque<WorkerId> recent_exit_order_;
  absl::flat_hash_map<WorkerId, std::vector<ExitWaiter>> exit_waiters_;
  absl::flat_hash_map<uint64_t, size_t> exit_waiters_per_conn_;
  absl::flat_hash_map<JobId, Job> jobs_;
  absl::flat_hash_map<uint64_t, Lease> leases_;
  std::deque<LeaseRequest> lease_queue_;
  absl::flat_hash_map<ObjectId, JobId> object_jobs_;  // which job created each object
  uint64_t next_lease_id_ = 1;

  // The cluster as the head last described it (this node's own entry is kept current).
  scheduler::ClusterResourceView view_;
  absl::flat_hash_map<std::string, std::string> node_addresses_;   // node id bytes -> address
  absl::flat_hash_map<std::string, std::string> node_transfer_;    // node id bytes -> transfer address
  absl::flat_hash_map<std::string, std::string> bundle_nodes_;     // "group/index" -> node id bytes
  absl::flat_hash_map<std::string, ResourceSet> bundle_sizes_;     // "group/index" -> its resources
  absl::flat_hash_set<std::string> removed_groups_;
  absl::flat_hash_set<JobId> ended_jobs_;
  absl::flat_hash_map<std::string, Bundle> bundles_;               // "group/index" -> bundle
  std::deque<ParkedRequest> parked_;
  bool replaying_ = false;
  absl::flat_hash_map<uint64_t, std::shared_ptr<Listing>> state_requests_;
  uint64_t next_request_id_ = 1;
  // Fault injection for tests: refuse this many bundle prepares.
  int testing_refuse_prepares_ = [] {
    const char* v = std::getenv("LUMEN_TESTING_REFUSE_PREPARES");
    return v ? std::atoi(v) : 0;
  }();
  std::unique_ptr<objectstore::TransferServer> transfer_server_;
  std::unique_ptr<objectstore::TransferClient> transfer_client_;
  // Pulls in progress: who waits for each.
  struct Pull {
    std::string source;  // node id bytes
    bool answered = false;  // its waiters were told it failed (the copy still runs)
    std::vector<std::pair<std::weak_ptr<Connection>, uint64_t>> waiters;
  };
  absl::flat_hash_map<ObjectId, Pull> pulls_;
};

absl::Status NodeDaemon::Setup() {
  std::filesystem::create_directories(options_.session_dir + "/sockets");
  socket_path_ = options_.session_dir + "/sockets/node-" + node_id_.Hex().substr(0, 12) + ".sock";

  std::map<std::string, double> totals = options_.resources;
  totals["object_store_memory"] = static_cast<double>(options_.object_store_bytes);
  auto total = ResourceSet::FromMap(totals);
  if (!total.ok()) return total.status();
  resources_ = std::make_unique<LocalResourceManager>(*total);
  gpus_ = std::make_unique<scheduler::GpuAssigner>(
      static_cast<int>(total->Get(scheduler::kGPU)));

  auto segment = objectstore::ShmSegment::Create("lumen-store", options_.object_store_bytes);
  if (!segment.ok()) return segment.status();
  segment_ = std::move(*segment);
  store_ = std::make_unique<objectstore::ObjectTable>(segment_.get(), options_.object_store_bytes);

  boost::system::error_code ec;
  ::unlink(socket_path_.c_str());
  acceptor_.open(asio::local::stream_protocol(), ec);
  if (!ec) acceptor_.bind(asio::local::stream_protocol::endpoint(socket_path_), ec);
  if (!ec) acceptor_.listen(512, ec);
  if (ec) return absl::UnavailableError(absl::StrCat("cannot listen on ", socket_path_, ": ", ec.message()));
  auto tcp = ListenTcp(io_, options_.host, 0);
  if (!tcp.ok()) return tcp.status();
  tcp_acceptor_ = std::move(*tcp);
  address_ = FormatAddress(
      {absl::StrCat(options_.host, ":", tcp_acceptor_->local_endpoint().port()), socket_path_});

  // Other nodes pull copies of our objects through the transfer server.
  std::string token = IsLoopbackHost(options_.host) ? "" : HeadToken();
  transfer_server_ = std::make_unique<objectstore::TransferServer>(
      io_,
      [this](const ObjectId& id) -> absl::StatusOr<std::span<const uint8_t>> {
        auto loc = store_->Get(kTransferClient, id);
        if (!loc.ok()) return loc.status();
        return std::span<const uint8_t>(segment_->readonly_base() + loc->offset, loc->size);
      },
      [this](const ObjectId& id) { store_->Release(kTransferClient, id); }, token);
  if (auto s = transfer_server_->Listen(options_.host, 0); !s.ok()) return s;
  transfer_client_ = std::make_unique<objectstore::TransferClient>(io_, HeadToken());
  view_.Upsert(LocalKey(), scheduler::NodeResources{resources_->total(), resources_->available(), true});
  return absl::OkStatus();
}

int NodeDaemon::Run() {
  logging::SetProcessTag("node");
  if (auto s = Setup(); !s.ok()) {
    LUMEN_LOG(ERROR) << "node daemon cannot start: " << s;
    if (options_.ready_fd >= 0) {
      std::string line = absl::StrCat("error ", s.message(), "\n");
      ssize_t ignored = ::write(options_.ready_fd, line.data(), line.size());
      (void)ignored;
    }
    return 1;
  }
  WatchSignals();
  AcceptNext();
  AcceptTcp();
  ReapIdleWorkers();
  if (options_.parent_fd >= 0) {
    parent_watch_.emplace(io_, options_.parent_fd);
    auto buf = std::make_shared<char>();
    parent_watch_->async_read_some(asio::buffer(buf.get(), 1),
                                   [this, buf](const boost::system::error_code&, size_t) {
                                     Shutdown("the driver that started this cluster exited");
                                   });
  }
  if (!options_.head_address.empty()) ConnectHead();
  if (options_.ready_fd >= 0) {
    std::string line = absl::StrCat("ready ", address_, "\n");
    ssize_t ignored = ::write(options_.ready_fd, line.data(), line.size());
    (void)ignored;
    ::close(options_.ready_fd);
  }
  LUMEN_LOG(INFO) << "node " << node_id_.Hex().substr(0, 12) << " serving on " << address_
                  << " with " << resources_->total().ToString();
  io_.run();
  return 0;
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

void NodeDaemon::AcceptNext() {
  acceptor_.async_accept([this](const boost::system::error_code& ec,
                                asio::local::stream_protocol::socket socket) {
    if (ec) return;
    int fd = socket.release();
    StartClient(Socket(io_, asio::generic::stream_protocol(AF_UNIX, 0), fd));
    AcceptNext();
  });
}

void NodeDaemon::AcceptTcp() {
  tcp_acceptor_->async_accept([this](const boost::system::error_code& ec,
                                     asio::ip::tcp::socket socket) {
    if (ec) return;
    StartClient(AdoptTcp(io_, std::move(socket)));
    AcceptTcp();
  });
}

void NodeDaemon::StartClient(Socket socket) {
  // Local processes (Unix socket) and remote ones (TCP) wait for their hello
  // in separate lines, so strangers on the network cannot crowd out workers.
  bool local = socket.local_endpoint().protocol().family() == AF_UNIX;
  auto conn = (local ? local_admission_ : admission_).Admit(std::move(socket));
  if (!conn) return;
  conn->context() = Client{};
  clients_[conn->id()] = conn;
  conn->Start([this](Connection& c, proto::Envelope::Reader m) { OnFrame(c, m); },
              [this](Connection& c, const absl::Status& why) { OnClose(c, why); });
}

void NodeDaemon::OnHello(Connection& conn, proto::Hello::Reader hello) {
  Client& client = std::any_cast<Client&>(conn.context());
  OutMessage out;
  auto reply = out.Init().initHelloReply();
  if (hello.getProtocolVersion() != proto::PROTOCOL_VERSION) {
    reply.setOk(false);
    reply.setError(absl::StrCat("protocol version ", hello.getProtocolVersion(),
                                " is not supported (node speaks ", proto::PROTOCOL_VERSION, ")"));
    (void)WriteFrameBlocking(conn.socket().native_handle(), out.builder());
    conn.Close(absl::FailedPreconditionError("protocol version mismatch"));
    return;
  }
  if (!IsLoopbackHost(options_.host) &&
      !ConstantTimeEquals(std::string_view(hello.getToken().cStr(), hello.getToken().size()),
                          HeadToken())) {
    conn.Close(absl::PermissionDeniedError(hello.getToken().size() == 0
                                               ? "connection without the cluster token"
                                               : "connection with a wrong cluster token"));
    return;
  }
  client.role = hello.getRole();
  client.job = IdFrom<JobId>(hello.getJobId());
  client.worker = IdFrom<WorkerId>(hello.getWorkerId());
  client.is_driver = hello.getIsDriver();
  if (client.role == proto::Role::REMOTE_OWNER) {
    if (ended_jobs_.contains(client.job)) {
      conn.Close(absl::FailedPreconditionError("this job has ended"));
      return;
    }
    // A job whose driver runs elsewhere: its workers here run the same binary.
    auto [jit, inserted] = jobs_.try_emplace(client.job);
    if (inserted) jit->second.remote = true;
    if (jit->second.exe_path.empty()) jit->second.exe_path = hello.getExePath().cStr();
  }
  if (client.role == proto::Role::WORKER) {
    auto it = workers_.find(client.worker);
    if (it == workers_.end() || it->second.state != WorkerState::kStarting) {
      conn.Close(absl::PermissionDeniedError("unknown worker"));
      return;
    }
    it->second.conn = conn.shared_from_this();
    it->second.address = hello.getListenAddress().cStr();
  } else if (client.role == proto::Role::DRIVER) {
    auto [jit, inserted] = jobs_.try_emplace(client.job);
    if (!inserted && jit->second.driver_conn != 0) {
      conn.Close(absl::AlreadyExistsError("a driver for this job is already connected"));
      return;
    }
    jit->second.exe_path = hello.getExePath().cStr();
    jit->second.driver_conn = conn.id();
  }
  client.hello_done = true;
  conn.AcceptHello();
  reply.setOk(true);
  reply.setNodeId(DataOf(node_id_));
  reply.setStoreSize(segment_->size());
  reply.setSessionDir(options_.session_dir);
  reply.setJobId(DataOf(client.job));
  reply.setNodeHost(options_.host);
  reply.setNodeAddress(address_);
  if (client.role == proto::Role::DRIVER || client.role == proto::Role::WORKER) {
    // The store's fd travels with the hello reply (SCM_RIGHTS).
    std::string frame;
    AppendFrame(out.builder(), &frame);
    auto s = objectstore::SendWithFd(conn.socket().native_handle(), frame.data(), frame.size(),
                                     segment_->fd());
    if (!s.ok()) {
      conn.Close(s);
      return;
    }
  } else {
    conn.Send(out.builder());
  }
  if (client.role == proto::Role::WORKER) {
    Worker& w = workers_[client.worker];
    w.state = WorkerState::kIdle;
    w.idle_since = std::chrono::steady_clock::now();
    Job& job = jobs_[w.job];
    --job.starting;
    job.idle.push_back(w.id);
    DispatchLeases();
  } else if (client.role == proto::Role::DRIVER) {
    // Prestart a pool for the new job.
    jobs_[client.job].remote = false;
    for (int i = 0; i < PoolSize(); ++i) StartWorker(client.job);
  }
}

void NodeDaemon::OnFrame(Connection& conn, proto::Envelope::Reader msg) {
  Client& client = std::any_cast<Client&>(conn.context());
  if (!client.hello_done) {
    if (!msg.isHello()) {
      conn.Close(absl::PermissionDeniedError("first frame was not a hello"));
      return;
    }
    OnHello(conn, msg.getHello());
    return;
  }
  switch (msg.which()) {
    case proto::Envelope::REQUEST_LEASE:
      OnLeaseRequest(conn, msg, /*replayed=*/false);
      return;
    case proto::Envelope::PULL_OBJECT:
      OnPull(conn, msg);
      return;
    case proto::Envelope::LIST_STATE:
      OnListState(conn, msg);
      return;
    case proto::Envelope::STATE_ROWS: {
      auto it = state_requests_.find(msg.getRequestId());
      if (it == state_requests_.end()) return;
      auto listing = it->second;
      state_requests_.erase(it);
      for (auto row : msg.getStateRows()) {
        std::vector<std::pair<std::string, std::string>> fields;
        for (auto f : row.getFields()) fields.emplace_back(f.getKey().cStr(), Bytes(f.getValue()));
        listing->rows.push_back(std::move(fields));
      }
      if (--listing->pending == 0) FinishListing(listing);
      return;
    }
    case proto::Envelope::RETURN_LEASE:
    case proto::Envelope::KILL_LEASE: {
      bool kill = msg.isKillLease();
      uint64_t lease_id = kill ? msg.getKillLease() : msg.getReturnLease();
      auto lit = leases_.find(lease_id);
      if (lit == leases_.end() || lit->second.holder_conn != conn.id()) return;
      WorkerId wid = lit->second.worker;
      ReleaseLease(lease_id);
      if (kill) {
        // The holder lost its connection to the worker: it must not be reused.
        auto wit = workers_.find(wid);
        if (wit != workers_.end()) {
          auto& idle = jobs_[wit->second.job].idle;
          idle.erase(std::remove(idle.begin(), idle.end(), wid), idle.end());
          KillWorker(wit->second, "its lease holder ended the lease");
        }
      }
      DispatchLeases();
      return;
    }
    case proto::Envelope::WORKER_BLOCKED:
    case proto::Envelope::WORKER_UNBLOCKED: {
      if (client.role != proto::Role::WORKER) return;
      auto it = workers_.find(client.worker);
      if (it == workers_.end() || it->second.state != WorkerState::kLeased) return;
      auto lit = leases_.find(it->second.lease_id);
      if (lit == leases_.end()) return;
      Lease& lease = lit->second;
      LocalResourceManager* pool = PoolFor(lease.bundle);
      if (pool == nullptr) return;
      ResourceSet cpu;
      cpu.Set(scheduler::kCPU, lease.resources.Get(scheduler::kCPU));
      if (msg.isWorkerBlocked() && !lease.cpu_released) {
        // A worker waiting in Get gives its CPU back so its children can run.
        pool->Release(cpu);
        lease.cpu_released = true;
        DispatchLeases();
      } else if (msg.isWorkerUnblocked() && lease.cpu_released) {
        // Take it back if free; otherwise run oversubscribed until the lease ends
        // (and the lease then gives back no CPU).
        if (pool->TryAcquire(cpu)) lease.cpu_released = false;
      }
      return;
    }
    case proto::Envelope::GET_WORKER_EXIT:
      OnGetWorkerExit(conn, msg);
      return;
    case proto::Envelope::GET_NODE_STATS: {
      OutMessage out;
      auto env = out.Init();
      env.setRequestId(msg.getRequestId());
      FillStats(env.initNodeStats());
      conn.Send(out.builder());
      return;
    }
    default:
      OnStoreRequest(conn, msg);
  }
}

void NodeDaemon::OnLeaseRequest(Connection& conn, proto::Envelope::Reader msg, bool replayed) {
  const Client& client = std::any_cast<Client&>(conn.context());
  auto req = msg.getRequestLease();
  std::map<std::string, double> wanted = ReadResources(req.getResources());
  std::map<std::string, double> placement = ReadResources(req.getPlacement());
  for (const auto& [name, qty] : wanted) placement[name] = std::max(placement[name], qty);
  auto request = ResourceSet::FromMap(wanted);
  auto placement_set = ResourceSet::FromMap(placement);
  if (request.ok() && !placement_set.ok()) request = placement_set.status();
  if (request.ok()) {
    if (auto s = scheduler::GpuAssigner::Validate(placement[std::string(scheduler::kGPU)]);
        !s.ok()) {
      request = s;
    }
  }
  bool can_lease = (client.role == proto::Role::DRIVER || client.role == proto::Role::WORKER ||
                    client.role == proto::Role::REMOTE_OWNER) &&
                   jobs_.contains(client.job);
  if (!can_lease || !request.ok()) {
    RefuseLease(conn, msg.getRequestId(),
                !can_lease ? std::string("only a driver or worker of a live job can lease")
                           : std::string(request.status().message()));
    return;
  }
  if (*client.queued_leases >= max_queued_leases_per_client_) {
    RefuseLease(conn, msg.getRequestId(),
                absl::StrCat("this client already has ", *client.queued_leases,
                             " lease requests waiting on this node, the limit "
                             "(LUMEN_MAX_QUEUED_LEASES_PER_CLIENT)"));
    return;
  }
  std::string name = req.getName().cStr();
  auto enqueue = [&](std::string group, int index) {
    lease_queue_.push_back(LeaseRequest{conn.weak_from_this(), msg.getRequestId(), *request,
                                        *placement_set, client.job, req.getDetached(),
                                        std::move(group), index, name,
                                        LeaseSlot(client.queued_leases)});
    DispatchLeases();
  };
  std::string group = Bytes(req.getPlacementGroup());
  int index = req.getBundleIndex();
  if (!group.empty()) {
    if (removed_groups_.contains(group)) {
      RefuseLease(conn, msg.getRequestId(),
                  absl::StrCat("placement group ", group, " was removed"));
      return;
    }
    std::string here;
    for (const auto& [key, bundle] : bundles_) {
      if (!bundle.committed || key.rfind(group + "/", 0) != 0) continue;
      if (index >= 0 && key != absl::StrCat(group, "/", index)) continue;
      if (!bundle.resources->IsFeasible(*placement_set)) continue;
      here = key;
    }
    if (!here.empty()) {
      enqueue(group, index);
      return;
    }
    // Where a bundle that can hold it is (alive nodes only).
    std::string target;
    bool any_bundle = false;
    for (const auto& [key, where] : bundle_nodes_) {
      if (key.rfind(group + "/", 0) != 0) continue;
      if (index >= 0 && key != absl::StrCat(group, "/", index)) continue;
      any_bundle = true;
      auto size = bundle_sizes_.find(key);
      if (size != bundle_sizes_.end() && !placement_set->IsSubsetOf(size->second)) continue;
      const scheduler::NodeResources* node = view_.Find(where);
      if (where != LocalKey() && (node == nullptr || !node->alive)) continue;
      target = where;
      if (where != LocalKey()) break;
    }
    if (req.getGrantOrReject()) {
      // Sent here for a bundle we do not have (any more): start over.
      AskAgain(conn, msg.getRequestId());
      return;
    }
    if (!target.empty() && target != LocalKey() && node_addresses_.contains(target)) {
      Spillback(conn, msg.getRequestId(), target);
      return;
    }
    if (any_bundle && target.empty()) {
      RefuseLease(conn, msg.getRequestId(),
                  absl::StrCat(name, " needs ", placement_set->ToString(),
                               ", more than its placement group bundle holds"));
      return;
    }
    // The group is not placed yet (or its bundle's node just died): wait.
    Park(conn, msg, replayed, /*infeasible=*/false, name, placement);
    return;
  }
  if (req.getGrantOrReject()) {
    // Another node sent it here: run it here if it can ever fit, else start over.
    if (resources_->IsFeasible(*placement_set)) {
      enqueue("", -1);
    } else {
      AskAgain(conn, msg.getRequestId());
    }
    return;
  }
  // This node as the policy sees it: what is free minus what queued requests
  // will take once their workers are ready.
  ResourceSet free_now = resources_->available();
  for (const auto& queued : lease_queue_) {
    if (!queued.group.empty()) continue;
    for (const auto& [rname, qty] : queued.placement.ToMap()) {
      free_now.Set(rname, std::max(0.0, free_now.Get(rname) - qty));
    }
  }
  view_.Upsert(LocalKey(), scheduler::NodeResources{resources_->total(), free_now, !shutting_down_});
  scheduler::SchedulingStrategy strategy;
  strategy.kind = static_cast<scheduler::StrategyKind>(req.getStrategy());
  strategy.node_id = Bytes(req.getAffinityNode());
  strategy.soft = req.getAffinitySoft();
  auto pick = view_.PickNode(*placement_set, strategy, LocalKey());
  if (!pick.ok()) {
    if (strategy.kind == scheduler::StrategyKind::kNodeAffinity && !strategy.soft) {
      NodeId wanted_node = NodeId::FromBinary(strategy.node_id);
      RefuseLease(conn, msg.getRequestId(),
                  absl::StrCat(name, " must run on node ", wanted_node.Hex(),
                               " (NodeAffinity, soft=false), which cannot run it: ",
                               pick.status().message()));
      return;
    }
    Park(conn, msg, replayed, /*infeasible=*/true, name, placement);
    return;
  }
  if (pick->node_id == LocalKey() || !node_addresses_.contains(pick->node_id)) {
    enqueue("", -1);
    return;
  }
  view_.Subtract(pick->node_id, *placement_set);
  Spillback(conn, msg.getRequestId(), pick->node_id);
}

void NodeDaemon::AskAgain(Connection& conn, uint64_t request_id) {
  OutMessage out;
  auto env = out.Init();
  env.setRequestId(request_id);
  env.initLeaseReply().setRetry(true);
  conn.Send(out.builder());
}

void NodeDaemon::Spillback(Connection& conn, uint64_t request_id, const std::string& node_id) {
  OutMessage out;
  auto env = out.Init();
  env.setRequestId(request_id);
  auto reply = env.initLeaseReply();
  reply.setGranted(false);
  reply.setSpillbackNode(DataOfString(node_id));
  reply.setSpillbackAddress(node_addresses_[node_id]);
  conn.Send(out.builder());
}

void NodeDaemon::Park(Connection& conn, proto::Envelope::Reader msg, bool replayed,
                      bool infeasible, const std::string& name,
                      const std::map<std::string, double>& resources) {
  ParkedRequest parked;
  parked.slot = LeaseSlot(std::any_cast<Client&>(conn.context()).queued_leases);
  parked.conn = conn.weak_from_this();
  parked.request_id = msg.getRequestId();
  parked.infeasible = infeasible;
  parked.name = name;
  parked.resources = resources;
  capnp::MallocMessageBuilder copy;
  copy.setRoot(msg);
  AppendFrame(copy, &parked.frame);
  parked_.push_back(std::move(parked));
  if (infeasible && !replayed) {
    // Tell the requester (its driver logs it) and keep it until a node fits.
    std::string totals;
    for (const auto& [id, node] : view_.nodes()) {
      if (node.alive) absl::StrAppend(&totals, totals.empty() ? "" : ", ", node.total.ToString());
    }
    auto need = ResourceSet::FromMap(resources);
    OutMessage out;
    auto env = out.Init();
    env.setRequestId(msg.getRequestId());
    auto reply = env.initLeaseReply();
    reply.setWaiting(true);
    reply.setError(absl::StrCat(
        "no node in the cluster can run ", name, ": it needs ",
        need.ok() ? need->ToString() : std::string("?"), " and the alive nodes have ", totals,
        ". It waits until a node that fits joins (`lumen status` lists it)."));
    conn.Send(out.builder());
  }
}

void NodeDaemon::ReplayParked() {
  if (replaying_ || parked_.empty()) return;
  replaying_ = true;
  std::deque<ParkedRequest> parked;
  parked.swap(parked_);
  for (auto& p : parked) {
    auto conn = p.conn.lock();
    if (!conn || conn->closed()) continue;
    const auto* words = reinterpret_cast<const capnp::word*>(p.frame.data() + kFrameHeaderBytes);
    size_t n = (p.frame.size() - kFrameHeaderBytes) / sizeof(capnp::word);
    capnp::FlatArrayMessageReader reader(kj::arrayPtr(words, n));
    p.slot = LeaseSlot();  // the request counts again where it lands, not twice
    OnLeaseRequest(*conn, reader.getRoot<proto::Envelope>(), /*replayed=*/true);
  }
  replaying_ = false;
}

void NodeDaemon::OnHeadFrame(proto::Envelope::Reader msg) {
  switch (msg.which()) {
    case proto::Envelope::CLUSTER_VIEW:
      OnClusterView(msg.getClusterView());
      return;
    case proto::Envelope::PREPARE_BUNDLES:
    case proto::Envelope::COMMIT_BUNDLES:
    case proto::Envelope::CANCEL_BUNDLES:
      OnBundles(msg);
      return;
    case proto::Envelope::MARK_NODE_DEAD:
      LUMEN_LOG(ERROR) << "the head declared this node dead (it missed its health checks); "
                          "stopping";
      Shutdown("declared dead by the head");
      return;
    default:
      return;
  }
}

void NodeDaemon::OnClusterView(proto::ClusterView::Reader view) {
  for (auto n : view.getNodes()) {
    std::string key = Bytes(n.getNodeId());
    if (key == LocalKey()) continue;
    auto total = ResourceSet::FromMap(ReadResources(n.getTotal()));
    auto available = ResourceSet::FromMap(ReadResources(n.getAvailable()));
    if (!total.ok() || !available.ok()) continue;
    const scheduler::NodeResources* known = view_.Find(key);
    if (known != nullptr && known->alive && !n.getAlive()) {
      // Copies from it will not finish: tell their readers now (a frozen node
      // keeps its sockets open), keep the memory until the transfer ends.
      for (auto& [object, pull] : pulls_) {
        if (pull.source != key || pull.answered) continue;
        pull.answered = true;
        AnswerPull(pull.waiters, absl::UnavailableError(absl::StrCat(
                                     "the only copy was on node ",
                                     IdFrom<NodeId>(n.getNodeId()).Hex(), ", which died")));
        pull.waiters.clear();
      }
      // Work our clients run there is lost (even if its processes still run,
      // the cluster no longer counts on them): tell them, so they retry it.
      for (const auto& [id, client_conn] : clients_) {
        const Client& c = std::any_cast<Client&>(client_conn->context());
        if (!c.hello_done || client_conn->closed() ||
            (c.role != proto::Role::DRIVER && c.role != proto::Role::WORKER)) {
          continue;
        }
        OutMessage out;
        out.Init().setMarkNodeDead(n.getNodeId());
        client_conn->Send(out.builder());
      }
    }
    view_.Upsert(key, scheduler::NodeResources{*total, *available, n.getAlive()});
    node_addresses_[key] = n.getAddress().cStr();
    node_transfer_[key] = n.getTransferAddress().cStr();
  }
  for (auto job : view.getEndedJobs()) {
    JobId id = IdFrom<JobId>(job);
    if (!ended_jobs_.contains(id)) EndJob(id);
  }
  bundle_nodes_.clear();
  bundle_sizes_.clear();
  for (auto b : view.getBundles()) {
    std::string key = absl::StrCat(Bytes(b.getGroupId()), "/", b.getIndex());
    bundle_nodes_[key] = Bytes(b.getNodeId());
    auto size = ResourceSet::FromMap(ReadResources(b.getResources()));
    if (size.ok()) bundle_sizes_[key] = *size;
  }
  for (auto g : view.getRemovedGroups()) {
    std::string group = Bytes(g);
    if (!removed_groups_.insert(group).second) continue;
    std::vector<std::string> keys;
    for (const auto& [key, bundle] : bundles_)
      if (key.rfind(group + "/", 0) == 0) keys.push_back(key);
    for (const auto& key : keys) RemoveBundle(key);
  }
  ReplayParked();
  DispatchLeases();
}

void NodeDaemon::OnBundles(proto::Envelope::Reader msg) {
  proto::BundleBatch::Reader batch = msg.isPrepareBundles()  ? msg.getPrepareBundles()
                                     : msg.isCommitBundles() ? msg.getCommitBundles()
                                                             : msg.getCancelBundles();
  std::string group = Bytes(batch.getGroupId());
  absl::Status status;
  if (msg.isPrepareBundles()) {
    // All of them or none: reserve each bundle out of the node's free resources.
    std::vector<std::string> done;
    for (auto b : batch.getBundles()) {
      std::string key = absl::StrCat(group, "/", b.getIndex());
      auto need = ResourceSet::FromMap(ReadResources(b.getResources()));
      if (!need.ok()) {
        status = need.status();
        break;
      }
      if (bundles_.contains(key)) continue;  // a repeated prepare: keep it as it is
      if (testing_refuse_prepares_ > 0) {
        --testing_refuse_prepares_;
        status = absl::UnavailableError("refused on purpose (LUMEN_TESTING_REFUSE_PREPARES)");
        break;
      }
      if (!resources_->TryAcquire(*need)) {
        status = absl::ResourceExhaustedError(absl::StrCat(
            "bundle ", b.getIndex(), " needs ", need->ToString(), " but only ",
            resources_->available().ToString(), " is free here"));
        break;
      }
      bundles_[key] = Bundle{std::make_unique<LocalResourceManager>(*need), false};
      done.push_back(key);
    }
    if (!status.ok()) {
      for (const auto& key : done) RemoveBundle(key);
    }
  } else if (msg.isCommitBundles()) {
    for (auto b : batch.getBundles()) {
      auto it = bundles_.find(absl::StrCat(group, "/", b.getIndex()));
      if (it == bundles_.end()) {
        status = absl::NotFoundError("bundle was not prepared here");
        break;
      }
      it->second.committed = true;
      bundle_nodes_[it->first] = LocalKey();
    }
  } else {
    for (auto b : batch.getBundles()) RemoveBundle(absl::StrCat(group, "/", b.getIndex()));
  }
  if (head_conn_ && !head_conn_->closed()) {
    OutMessage out;
    auto env = out.Init();
    env.setRequestId(msg.getRequestId());
    auto reply = env.initBundleReply();
    reply.setOk(status.ok());
    reply.setError(std::string(status.message()));
    head_conn_->Send(out.builder());
  }
  if (msg.isCommitBundles()) ReplayParked();
  DispatchLeases();
}

void NodeDaemon::RemoveBundle(const std::string& key) {
  auto it = bundles_.find(key);
  if (it == bundles_.end()) return;
  // What runs in it ends; the reserved resources go back to the node.
  std::vector<uint64_t> ended;
  for (const auto& [lease_id, lease] : leases_)
    if (lease.bundle == key) ended.push_back(lease_id);
  for (uint64_t lease_id : ended) {
    Lease lease = leases_[lease_id];
    leases_.erase(lease_id);
    gpus_->Release(lease.gpu_ids, lease.resources.Get(scheduler::kGPU));
    auto wit = workers_.find(lease.worker);
    if (wit != workers_.end()) {
      wit->second.lease_id = 0;
      KillWorker(wit->second, "its placement group bundle was removed");
    }
  }
  resources_->Release(it->second.resources->total());
  bundles_.erase(it);
  bundle_nodes_.erase(key);
  std::string group = key.substr(0, key.rfind('/'));
  bool any_left = false;
  for (const auto& [k, b] : bundles_) any_left |= k.rfind(group + "/", 0) == 0;
  if (!any_left) {
    for (auto qit = lease_queue_.begin(); qit != lease_queue_.end();) {
      if (qit->group != group) {
        ++qit;
        continue;
      }
      if (auto conn = qit->conn.lock()) {
        if (removed_groups_.contains(group)) {
          RefuseLease(*conn, qit->request_id, "its placement group was removed");
        } else {
          // Rolled back here (it may be placed again elsewhere): ask again.
          AskAgain(*conn, qit->request_id);
        }
      }
      qit = lease_queue_.erase(qit);
    }
  }
}

LocalResourceManager* NodeDaemon::PoolFor(const std::string& bundle) {
  if (bundle.empty()) return resources_.get();
  auto it = bundles_.find(bundle);
  return it == bundles_.end() ? nullptr : it->second.resources.get();
}

std::string NodeDaemon::FindBundleWithRoom(const std::string& group, int index,
                                           const ResourceSet& need) {
  if (index >= 0) {
    std::string key = absl::StrCat(group, "/", index);
    auto it = bundles_.find(key);
    return it != bundles_.end() && it->second.committed ? key : "";
  }
  std::string any;
  for (const auto& [key, bundle] : bundles_) {
    if (!bundle.committed || key.rfind(group + "/", 0) != 0) continue;
    if (need.IsSubsetOf(bundle.resources->available())) return key;
    if (any.empty()) any = key;
  }
  return any;
}

void NodeDaemon::OnPull(Connection& conn, proto::Envelope::Reader msg) {
  const Client& client = std::any_cast<Client&>(conn.context());
  auto pull = msg.getPullObject();
  ObjectId id = IdFrom<ObjectId>(pull.getObjectId());
  auto reply = [request_id = msg.getRequestId()](Connection& c, const absl::Status& status) {
    OutMessage out;
    auto env = out.Init();
    env.setRequestId(request_id);
    auto r = env.initStoreReply();
    r.setOk(status.ok());
    r.setCode(static_cast<uint32_t>(status.code()));
    r.setError(std::string(status.message()));
    c.Send(out.builder());
  };
  if (client.role != proto::Role::DRIVER && client.role != proto::Role::WORKER) {
    reply(conn, absl::PermissionDeniedError("only local drivers and workers pull objects"));
    return;
  }
  auto pending = pulls_.find(id);
  if (pending != pulls_.end() && !pending->second.answered) {
    pending->second.waiters.emplace_back(conn.weak_from_this(), msg.getRequestId());
    return;
  }
  if (pending != pulls_.end()) {
    reply(conn, absl::UnavailableError("its source node died during the copy"));
    return;
  }
  auto state = store_->GetState(id);
  if (state.ok() && *state == objectstore::ObjectState::kSealed) {
    reply(conn, absl::OkStatus());
    return;
  }
  std::string node = Bytes(pull.getNodeId());
  auto tit = node_transfer_.find(node);
  const scheduler::NodeResources* source = view_.Find(node);
  if (tit == node_transfer_.end() || tit->second.empty() || source == nullptr || !source->alive) {
    reply(conn, absl::UnavailableError(absl::StrCat(
                    "the only copy was on node ", IdFrom<NodeId>(pull.getNodeId()).Hex(),
                    source == nullptr ? ", which is unknown" : ", which is dead")));
    return;
  }
  uint64_t size = pull.getSize();
  auto offset = store_->Create(kPullClient, id, size);
  if (!offset.ok()) {
    reply(conn, offset.status());
    return;
  }
  object_jobs_[id] = IdFrom<JobId>(pull.getJobId());
  Pull& entry = pulls_[id];
  entry.source = node;
  entry.waiters.emplace_back(conn.weak_from_this(), msg.getRequestId());
  transfer_client_->Pull(tit->second, id, size, segment_->writable_base() + *offset,
                         [this, id](absl::Status status) { FinishPull(id, std::move(status)); });
}

void NodeDaemon::OnListState(Connection& conn, proto::Envelope::Reader msg) {
  auto listing = std::make_shared<Listing>();
  listing->requester = conn.weak_from_this();
  listing->request_id = msg.getRequestId();
  std::string what = msg.getListState().cStr();
  for (const auto& [id, client_conn] : clients_) {
    const Client& c = std::any_cast<Client&>(client_conn->context());
    if (!c.hello_done || client_conn->closed() ||
        (c.role != proto::Role::DRIVER && c.role != proto::Role::WORKER)) {
      continue;
    }
    uint64_t request_id = next_request_id_++;
    state_requests_[request_id] = listing;
    ++listing->pending;
    OutMessage out;
    auto env = out.Init();
    env.setRequestId(request_id);
    env.setListState(what);
    client_conn->Send(out.builder());
  }
  if (listing->pending == 0) {
    FinishListing(listing);
    return;
  }
  // A process busy in a long task answers from its io thread; one that does
  // not answer in time is left out.
  listing->timer = std::make_unique<asio::steady_timer>(io_, std::chrono::seconds(2));
  listing->timer->async_wait([this, listing](const boost::system::error_code& ec) {
    if (!ec) FinishListing(listing);
  });
}

void NodeDaemon::FinishListing(const std::shared_ptr<Listing>& listing) {
  if (listing->done) return;
  listing->done = true;
  if (listing->timer) listing->timer->cancel();
  for (auto it = state_requests_.begin(); it != state_requests_.end();) {
    if (it->second == listing) {
      state_requests_.erase(it++);
    } else {
      ++it;
    }
  }
  auto conn = listing->requester.lock();
  if (!conn || conn->closed()) return;
  capnp::MallocMessageBuilder out;
  auto env = out.initRoot<proto::Envelope>();
  env.setRequestId(listing->request_id);
  auto list = env.initStateRows(listing->rows.size());
  for (size_t i = 0; i < listing->rows.size(); ++i) {
    auto fields = list[i].initFields(listing->rows[i].size() + 1);
    fields[0].setKey("NODE_DAEMON");
    std::string node = node_id_.Hex().substr(0, 12);
    fields[0].setValue(DataOfString(node));
    for (size_t j = 0; j < listing->rows[i].size(); ++j) {
      fields[j + 1].setKey(listing->rows[i][j].first);
      fields[j + 1].setValue(DataOfString(listing->rows[i][j].second));
    }
  }
  conn->Send(out);
}

void NodeDaemon::FinishPull(const ObjectId& id, absl::Status status) {
  if (shutting_down_) return;
  auto it = pulls_.find(id);
  if (it == pulls_.end()) return;
  bool answered = it->second.answered;
  if (status.ok() && !answered) {
    status = store_->Seal(kPullClient, id);
  } else {
    // Its memory is free again only now that nothing writes into it.
    (void)store_->Abort(kPullClient, id);
    object_jobs_.erase(id);
    if (!status.ok()) LUMEN_LOG(WARNING) << "pulling object " << id.Hex() << " failed: " << status;
    if (status.ok()) status = absl::UnavailableError("its source node died during the copy");
  }
  auto waiters = std::move(it->second.waiters);
  pulls_.erase(it);
  AnswerPull(waiters, status);
}

void NodeDaemon::AnswerPull(
    const std::vector<std::pair<std::weak_ptr<Connection>, uint64_t>>& waiters,
    const absl::Status& status) {
  for (const auto& [weak, request_id] : waiters) {
    auto conn = weak.lock();
    if (!conn || conn->closed()) continue;
    OutMessage out;
    auto env = out.Init();
    env.setRequestId(request_id);
    auto r = env.initStoreReply();
    r.setOk(status.ok());
    r.setCode(static_cast<uint32_t>(status.ok() ? absl::StatusCode::kOk
                                                 : absl::StatusCode::kUnavailable));
    r.setError(std::string(status.message()));
    conn->Send(out.builder());
  }
}

void NodeDaemon::OnStoreRequest(Connection& conn, proto::Envelope::Reader msg) {
  objectstore::ClientId client = conn.id();
  const Client& client_info = std::any_cast<Client&>(conn.context());
  bool local_client =
      client_info.role == proto::Role::DRIVER || client_info.role == proto::Role::WORKER;
  bool remote_delete =
      client_info.role == proto::Role::REMOTE_OWNER && msg.isStoreDelete();
  if (!local_client && !remote_delete) {
    conn.Close(absl::PermissionDeniedError("store requests need a driver or worker hello"));
    return;
  }
  auto id_of = [](proto::StoreRequest::Reader r) { return IdFrom<ObjectId>(r.getObjectId()); };
  auto reply = [&](absl::Status status, uint64_t offset, uint64_t size) {
    OutMessage out;
    auto env = out.Init();
    env.setRequestId(msg.getRequestId());
    auto r = env.initStoreReply();
    r.setOk(status.ok());
    r.setCode(static_cast<uint32_t>(status.code()));
    r.setError(std::string(status.message()));
    r.setOffset(offset);
    r.setSize(size);
    conn.Send(out.builder());
  };
  switch (msg.which()) {
    case proto::Envelope::STORE_CREATE: {
      auto req = msg.getStoreCreate();
      auto offset = store_->Create(client, id_of(req), req.getSize());
      if (offset.ok()) {
        // A detached actor's objects belong to no job: they outlive its
        // creator's, and whoever owns them may free them.
        auto wit = workers_.find(client_info.worker);
        bool detached = client_info.role == proto::Role::WORKER && wit != workers_.end() &&
                        IsDetached(wit->second);
        object_jobs_[id_of(req)] = detached ? JobId::Nil() : client_info.job;
      }
      reply(offset.status(), offset.ok() ? *offset : 0, req.getSize());
      return;
    }
    case proto::Envelope::STORE_SEAL:
      reply(store_->Seal(client, id_of(msg.getStoreSeal())), 0, 0);
      return;
    case proto::Envelope::STORE_ABORT: {
      auto status = store_->Abort(client, id_of(msg.getStoreAbort()));
      if (status.ok()) object_jobs_.erase(id_of(msg.getStoreAbort()));
      reply(status, 0, 0);
      return;
    }
    case proto::Envelope::STORE_GET: {
      auto loc = store_->Get(client, id_of(msg.getStoreGet()));
      reply(loc.status(), loc.ok() ? loc->offset : 0, loc.ok() ? loc->size : 0);
      return;
    }
    case proto::Envelope::STORE_RELEASE:
      store_->Release(client, id_of(msg.getStoreRelease()));
      return;
    case proto::Envelope::STORE_DELETE: {
      // Only the job that created an object frees it.
      ObjectId id = id_of(msg.getStoreDelete());
      auto jit = object_jobs_.find(id);
      if (jit == object_jobs_.end() ||
          (!jit->second.IsNil() && jit->second != client_info.job)) {
        return;
      }
      object_jobs_.erase(jit);
      store_->Delete(id);
      return;
    }
    default: {
      static auto* limiter = new logging::RateLimiter(5, std::chrono::seconds(1));
      uint64_t suppressed = 0;
      if (limiter->Allow(&suppressed)) {
        LUMEN_LOG(WARNING) << "ignoring an unexpected message (" << msg.which() << ") from "
                           << conn.peer() << " (" << suppressed << " more suppressed)";
      }
    }
  }
}

void NodeDaemon::StartWorker(const JobId& job_id) {
  auto jit = jobs_.find(job_id);
  if (jit == jobs_.end() || jit->second.exe_path.empty() || shutting_down_) return;
  WorkerId id = WorkerId::Random();
  SpawnOptions spawn;
  spawn.executable = jit->second.exe_path;
  spawn.env = {{"LUMEN_ROLE", "worker"},
               {"LUMEN_NODE_SOCKET", socket_path_},
               {"LUMEN_NODE_HOST", options_.host},
               {"LUMEN_SESSION_DIR", options_.session_dir},
               {"LUMEN_WORKER_ID", id.Hex()},
               {"LUMEN_JOB_ID", job_id.Hex()},
               {"LUMEN_PARENT_FD", ""},
               {"LUMEN_READY_FD", ""},
               {"LUMEN_ADDRESS", ""},
               {"LUMEN_HEAD_ADDRESS", options_.head_address},
               {"LUMEN_TOKEN", HeadToken()}};
  spawn.die_with_parent = true;
  spawn.oom_score_adj = 500;  // workers go before daemons under memory pressure
  auto pid = SpawnProcess(spawn);
  if (!pid.ok()) {
    LUMEN_LOG(ERROR) << "cannot start a worker: " << pid.status();
    if (++jit->second.failed_starts >= kMaxFailedStarts) {
      // Answered outside the dispatch loop that may be running now.
      std::string why = std::string(pid.status().message());
      asio::post(io_, [this, job_id, why] {
        if (jobs_.contains(job_id)) FailJobLeaseRequests(job_id, why);
      });
    }
    return;
  }
  Worker& w = workers_[id];
  w.id = id;
  w.pid = *pid;
  w.job = job_id;
  worker_pids_[*pid] = id;
  ++jit->second.starting;
}

void NodeDaemon::DispatchLeases() {
  // One pass, O(queued requests + leases per requester connection): the
  // requests that stay are moved to `kept` (erasing from the middle of a deque
  // is linear, so erasing each grant was quadratic), each job's queued requests
  // are counted once up front (not rescanned per request), and holders are
  // asked for idle leases once per requester connection per pass.
  absl::flat_hash_map<JobId, int> waiting;  // requests of each job still queued
  for (const auto& r : lease_queue_) ++waiting[r.job];
  absl::flat_hash_set<uint64_t> asked_for;  // requester connections
  auto ask_holders = [&](uint64_t requester) {
    if (asked_for.insert(requester).second) AskHoldersForIdleLeases(requester);
  };
  std::deque<LeaseRequest> queue;
  queue.swap(lease_queue_);
  std::deque<LeaseRequest> kept;
  for (auto& request : queue) {
    auto conn = request.conn.lock();
    if (!conn || conn->closed()) {
      --waiting[request.job];
      continue;
    }
    auto jit = jobs_.find(request.job);
    if (jit == jobs_.end()) {
      --waiting[request.job];
      continue;
    }
    Job& job = jit->second;
    LocalResourceManager* pool = resources_.get();
    std::string bundle;
    if (!request.group.empty()) {
      // Within the group's bundle(s) here, never the node's free resources.
      bundle = FindBundleWithRoom(request.group, request.bundle_index, request.placement);
      pool = bundle.empty() ? nullptr : PoolFor(bundle);
    }
    if (pool == nullptr || !request.placement.IsSubsetOf(pool->available())) {
      ask_holders(conn->id());
      kept.push_back(std::move(request));
      continue;
    }
    // Drop idle workers that died since they were pooled.
    while (!job.idle.empty() && !workers_.contains(job.idle.front())) job.idle.pop_front();
    if (job.idle.empty()) {
      // Start enough workers for the requests of this job that fit right now.
      if (job.starting < std::min(waiting[request.job], 64)) StartWorker(request.job);
      kept.push_back(std::move(request));
      continue;
    }
    // The GPUs themselves: whole ones alone, fractions sharing one device.
    std::optional<std::vector<int>> gpu_ids =
        gpus_->Assign(request.resources.Get(scheduler::kGPU));
    if (!gpu_ids) {
      ask_holders(conn->id());
      kept.push_back(std::move(request));
      continue;
    }
    pool->TryAcquire(request.resources);
    WorkerId wid = job.idle.front();
    job.idle.pop_front();
    job.failed_starts = 0;
    Worker& w = workers_[wid];
    uint64_t lease_id = next_lease_id_++;
    w.state = WorkerState::kLeased;
    w.lease_id = lease_id;
    leases_[lease_id] =
        Lease{wid, request.resources, conn->id(), false, false, request.detached, *gpu_ids, bundle};
    OutMessage out;
    auto env = out.Init();
    env.setRequestId(request.request_id);
    auto reply = env.initLeaseReply();
    reply.setGranted(true);
    reply.setLeaseId(lease_id);
    reply.setWorkerId(DataOf(wid));
    reply.setWorkerAddress(w.address);
    reply.setWorkerPid(w.pid);
    reply.setNodeId(DataOf(node_id_));
    auto ids = reply.initGpuIds(gpu_ids->size());
    for (size_t i = 0; i < gpu_ids->size(); ++i) ids.set(i, (*gpu_ids)[i]);
    conn->Send(out.builder());
    --waiting[request.job];
  }
  // Requests queued while this pass ran (none are expected: nothing above
  // enqueues synchronously) go after the ones that were waiting.
  for (auto& late : lease_queue_) kept.push_back(std::move(late));
  lease_queue_.swap(kept);
}

void NodeDaemon::AskHoldersForIdleLeases(uint64_t requester) {
  // Holders keep idle leases briefly for their next task; when a request waits
  // for resources, ask each holder (once per lease) to give idle ones back.
  absl::flat_hash_map<uint64_t, bool> holders;
  for (auto& [lease_id, lease] : leases_) {
    if (lease.reclaim_asked || lease.holder_conn == requester) continue;
    lease.reclaim_asked = true;
    holders[lease.holder_conn] = true;
  }
  for (const auto& [conn_id, unused] : holders) {
    auto cit = clients_.find(conn_id);
    if (cit == clients_.end() || cit->second->closed()) continue;
    OutMessage out;
    out.Init().setReclaimLeases();
    cit->second->Send(out.builder());
  }
}

void NodeDaemon::FreeLeaseResources(const Lease& lease) {
  ResourceSet held = lease.resources;
  if (lease.cpu_released) held.Set(scheduler::kCPU, 0);
  // A removed bundle gave all of its resources back already.
  if (LocalResourceManager* pool = PoolFor(lease.bundle)) pool->Release(held);
  gpus_->Release(lease.gpu_ids, lease.resources.Get(scheduler::kGPU));
}

void NodeDaemon::ReleaseLease(uint64_t lease_id) {
  auto it = leases_.find(lease_id);
  if (it == leases_.end()) return;
  Lease lease = it->second;
  leases_.erase(it);
  FreeLeaseResources(lease);
  auto wit = workers_.find(lease.worker);
  if (wit != workers_.end() && wit->second.state == WorkerState::kLeased) {
    wit->second.state = WorkerState::kIdle;
    wit->second.idle_since = std::chrono::steady_clock::now();
    wit->second.lease_id = 0;
    jobs_[wit->second.job].idle.push_back(lease.worker);
  }
}

void NodeDaemon::OnClose(Connection& conn, const absl::Status& why) {
  uint64_t id = conn.id();
  Client client = std::any_cast<Client>(conn.context());
  if (!why.ok() && why.code() != absl::StatusCode::kUnavailable &&
      why.code() != absl::StatusCode::kCancelled) {
    LogRejectedConnection("node daemon", conn.peer(), why);
  }
  store_->DisconnectClient(id);
  // Leases held by this client end; their workers may still run its tasks, so
  // they are stopped rather than reused.
  std::vector<uint64_t> held;
  for (const auto& [lease_id, lease] : leases_)
    if (lease.holder_conn == id && !lease.detached) held.push_back(lease_id);
  for (auto& [lease_id, lease] : leases_) {
    if (lease.holder_conn == id && lease.detached) lease.holder_conn = 0;  // orphaned, kept
  }
  for (uint64_t lease_id : held) {
    WorkerId wid = leases_[lease_id].worker;
    ReleaseLease(lease_id);
    auto wit = workers_.find(wid);
    if (wit != workers_.end()) {
      auto& idle = jobs_[wit->second.job].idle;
      idle.erase(std::remove(idle.begin(), idle.end(), wid), idle.end());
      KillWorker(wit->second, "its lease holder disconnected");
    }
  }
  if (client.role == proto::Role::DRIVER && jobs_.contains(client.job) &&
      jobs_[client.job].driver_conn == id) {
    // The job is over, here and (through the head) on every node.
    EndJob(client.job);
    if (head_conn_ && !head_conn_->closed()) {
      OutMessage out;
      out.Init().setJobEnded(DataOf(client.job));
      head_conn_->Send(out.builder());
    }
  } else if (client.role == proto::Role::REMOTE_OWNER && client.is_driver) {
    EndJob(client.job);
  } else if (client.role == proto::Role::WORKER) {
    auto wit = workers_.find(client.worker);
    if (wit != workers_.end()) {
      auto jit = jobs_.find(wit->second.job);
      if (jit != jobs_.end()) {
        auto& idle = jit->second.idle;
        idle.erase(std::remove(idle.begin(), idle.end(), client.worker), idle.end());
      }
      if (ProcessAlive(wit->second.pid)) {
        KillWorker(wit->second, "its connection to the node daemon closed");
      }
    }
  }
  auto keep = clients_[id];
  clients_.erase(id);
  asio::post(io_, [keep] {});
  DispatchLeases();
}

void NodeDaemon::EndJob(const JobId& job_id) {
  ended_jobs_.insert(job_id);
  if (!jobs_.contains(job_id)) return;
  // Its workers and its objects go with it, except detached actors, which keep
  // the job's entry (its binary) for their own work.
  KillJobWorkers(job_id);
  bool has_detached = false;
  for (const auto& [wid, w] : workers_) has_detached |= w.job == job_id && IsDetached(w);
  if (has_detached) {
    jobs_[job_id].driver_conn = 0;
    jobs_[job_id].idle.clear();
  } else {
    jobs_.erase(job_id);
  }
  for (auto oit = object_jobs_.begin(); oit != object_jobs_.end();) {
    if (oit->second == job_id) {
      store_->Delete(oit->first);
      object_jobs_.erase(oit++);
    } else {
      ++oit;
    }
  }
}

void NodeDaemon::FailJobLeaseRequests(const JobId& job_id, const std::string& why) {
  std::string exe = jobs_.contains(job_id) ? jobs_[job_id].exe_path : "";
  std::string message = absl::StrCat(
      "workers of this job keep exiting before they connect (last one ", why, "): does ", exe,
      " call lumen::Init(argc, argv) first thing in main?");
  LUMEN_LOG(ERROR) << message;
  for (auto it = lease_queue_.begin(); it != lease_queue_.end();) {
    if (it->job != job_id) {
      ++it;
      continue;
    }
    if (auto conn = it->conn.lock()) RefuseLease(*conn, it->request_id, message);
    it = lease_queue_.erase(it);
  }
  jobs_[job_id].failed_starts = 0;
}

void NodeDaemon::RefuseLease(Connection& conn, uint64_t request_id, const std::string& why) {
  OutMessage out;
  auto env = out.Init();
  env.setRequestId(request_id);
  auto reply = env.initLeaseReply();
  reply.setGranted(false);
  reply.setError(why);
  conn.Send(out.builder());
}

bool NodeDaemon::IsDetached(const Worker& w) const {
  if (w.state != WorkerState::kLeased) return false;
  auto lit = leases_.find(w.lease_id);
  return lit != leases_.end() && lit->second.detached;
}

void NodeDaemon::KillJobWorkers(const JobId& job_id) {
  for (auto& [wid, w] : workers_) {
    if (w.job == job_id && !IsDetached(w)) KillWorker(w, "its job ended");
  }
}

void NodeDaemon::ReapChildren() {
  while (true) {
    int status = 0;
    pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid <= 0) break;
    auto it = worker_pids_.find(pid);
    if (it == worker_pids_.end()) continue;
    WorkerId wid = it->second;
    worker_pids_.erase(it);
    auto wit = workers_.find(wid);
    if (wit == workers_.end()) continue;
    WorkerExit exit;
    exit.job = wit->second.job;
    exit.pid = pid;
    exit.cause = DescribeExit(status, wit->second.kill_reason);
    exit.signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
    exit.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    std::string why = exit.cause;
    RecordWorkerExit(wid, std::move(exit));
    // Handling may re-enter (closing its connection dispatches leases, which can
    // start workers): work on a copy of an entry already erased.
    Worker gone = std::move(wit->second);
    workers_.erase(wit);
    OnWorkerGone(gone, why);
  }
  DispatchLeases();
}

void NodeDaemon::OnWorkerGone(Worker& w, const std::string& why) {
  LUMEN_LOG(DEBUG) << "worker " << w.pid << " " << why;
  if (w.state == WorkerState::kStarting) {
    auto jit = jobs_.find(w.job);
    if (jit != jobs_.end()) {
      --jit->second.starting;
      if (++jit->second.failed_starts >= kMaxFailedStarts) FailJobLeaseRequests(w.job, why);
    }
  }
  if (w.state == WorkerState::kLeased) {
    auto lit = leases_.find(w.lease_id);
    if (lit != leases_.end()) {
      FreeLeaseResources(lit->second);
      leases_.erase(lit);
    }
  }
  auto jit = jobs_.find(w.job);
  if (jit != jobs_.end()) {
    auto& idle = jit->second.idle;
    idle.erase(std::remove(idle.begin(), idle.end(), w.id), idle.end());
  }
  if (w.conn) w.conn->Close(absl::CancelledError("worker exited"));
  if (!w.address.empty()) ::unlink(ParseAddress(w.address).unix_path.c_str());
}

void NodeDaemon::KillWorker(Worker& w, const char* reason) {
  // Only a kill that ends the process is its cause (not one that reaches a
  // process already dying, e.g. of someone else's SIGKILL).
  if (w.kill_reason.empty() && !ProcessExiting(w.pid)) w.kill_reason = reason;
  ::kill(w.pid, SIGKILL);
}

void NodeDaemon::RecordWorkerExit(const WorkerId& id, WorkerExit exit) {
  auto waiters = exit_waiters_.extract(id);
  if (!waiters.empty()) {
    for (auto& waiter : waiters.mapped()) {
      waiter.timer->cancel();
      auto count = exit_waiters_per_conn_.find(waiter.conn_id);
      if (count != exit_waiters_per_conn_.end() && --count->second == 0) {
        exit_waiters_per_conn_.erase(count);
      }
      auto conn = waiter.conn.lock();
      if (conn && !conn->closed()) SendWorkerExit(*conn, waiter.request_id, &exit);
    }
  }
  if (recent_exits_.size() >= kMaxRecentExits && !recent_exit_order_.empty()) {
    recent_exits_.erase(recent_exit_order_.front());
    recent_exit_order_.pop_front();
  }
  if (recent_exits_.insert_or_assign(id, std::move(exit)).second) {
    recent_exit_order_.push_back(id);
  }
}

void NodeDaemon::SendWorkerExit(Connection& conn, uint64_t request_id, const WorkerExit* exit) {
  OutMessage out;
  auto env = out.Init();
  env.setRequestId(request_id);
  auto info = env.initWorkerExit();
  info.setNodeId(DataOf(node_id_));
  info.setKnown(exit != nullptr);
  info.setExitCode(-1);
  if (exit != nullptr) {
    info.setPid(exit->pid);
    info.setCause(exit->cause);
    info.setSignal(exit->signal);
    info.setExitCode(exit->exit_code);
  }
  conn.Send(out.builder());
}

void NodeDaemon::OnGetWorkerExit(Connection& conn, proto::Envelope::Reader msg) {
  const Client& client = std::any_cast<Client&>(conn.context());
  uint64_t request_id = msg.getRequestId();
  auto query = msg.getGetWorkerExit();
  WorkerId id = IdFrom<WorkerId>(query.getWorkerId());
  bool may_ask = client.role == proto::Role::DRIVER || client.role == proto::Role::WORKER ||
                 client.role == proto::Role::REMOTE_OWNER;
  // Only processes of the worker's own job learn how it ended.
  if (auto it = recent_exits_.find(id); may_ask && it != recent_exits_.end()) {
    SendWorkerExit(conn, request_id, it->second.job == client.job ? &it->second : nullptr);
    return;
  }
  auto wit = workers_.find(id);
  size_t& pending = exit_waiters_per_conn_[conn.id()];
  if (!may_ask || wit == workers_.end() || wit->second.job != client.job ||
      pending >= kMaxExitWaitersPerConnection || query.getTimeoutMs() == 0) {
    if (pending == 0) exit_waiters_per_conn_.erase(conn.id());
    SendWorkerExit(conn, request_id, nullptr);
    return;
  }
  // Still running (its socket closes before it is reaped): answer when it is,
  // or at the deadline.
  ++pending;
  auto timer = std::make_shared<asio::steady_timer>(
      io_, std::chrono::milliseconds(std::min(query.getTimeoutMs(), kMaxExitWaitMs)));
  uint64_t conn_id = conn.id();
  exit_waiters_[id].push_back(ExitWaiter{conn.weak_from_this(), conn_id, request_id, timer});
  timer->async_wait([this, id, request_id, conn_id](const boost::system::error_code& ec) {
    if (ec) return;  // answered
    auto wit = exit_waiters_.find(id);
    if (wit == exit_waiters_.end()) return;
    auto& list = wit->second;
    for (auto it = list.begin(); it != list.end(); ++it) {
      if (it->request_id != request_id || it->conn_id != conn_id) continue;
      auto conn = it->conn.lock();
      list.erase(it);
      if (list.empty()) exit_waiters_.erase(wit);
      auto count = exit_waiters_per_conn_.find(conn_id);
      if (count != exit_waiters_per_conn_.end() && --count->second == 0) {
        exit_waiters_per_conn_.erase(count);
      }
      if (conn && !conn->closed()) SendWorkerExit(*conn, request_id, nullptr);
      return;
    }
  });
}

void NodeDaemon::FillStats(proto::NodeStats::Builder stats) {
  stats.setNodeId(DataOf(node_id_));
  stats.setAddress(address_);
  stats.setTransferAddress(transfer_server_ ? transfer_server_->address() : "");
  stats.setHostAddress(options_.host);
  std::vector<JobId> drivers;
  for (const auto& [job_id, job] : jobs_)
    if (!job.remote && job.driver_conn != 0) drivers.push_back(job_id);
  auto driver_list = stats.initDrivers(drivers.size());
  for (size_t d = 0; d < drivers.size(); ++d) driver_list.set(d, DataOf(drivers[d]));
  char host[256] = {0};
  ::gethostname(host, sizeof(host) - 1);
  stats.setHostname(host);
  stats.setPid(::getpid());
  stats.setAlive(!shutting_down_);
  auto total = resources_->total().ToMap();
  auto available = resources_->available().ToMap();
  SetResources(stats.initTotal(total.size()), total);
  SetResources(stats.initAvailable(available.size()), available);
  auto store = store_->GetStats();
  stats.setStoreCapacity(store.capacity);
  stats.setStoreUsed(store.used);
  stats.setStoreObjects(store.num_objects);
  uint32_t idle = 0;
  for (const auto& [id, job] : jobs_) idle += job.idle.size();
  stats.setWorkers(workers_.size());
  stats.setIdleWorkers(idle);
  stats.setQueuedLeases(lease_queue_.size() + parked_.size());
  stats.setActiveLeases(leases_.size());
  stats.setSessionDir(options_.session_dir);
  // Infeasible demand, grouped by what it needs.
  std::map<std::pair<std::string, std::string>, std::pair<uint32_t, std::map<std::string, double>>>
      demand;
  for (const auto& p : parked_) {
    if (!p.infeasible || p.conn.expired()) continue;
    auto& d = demand[{p.name, QueueKeyOf(p.resources)}];
    ++d.first;
    d.second = p.resources;
  }
  auto list = stats.initInfeasible(demand.size());
  size_t i = 0;
  for (const auto& [key, d] : demand) {
    list[i].setName(key.first);
    list[i].setCount(d.first);
    SetResources(list[i].initResources(d.second.size()), d.second);
    ++i;
  }
}

void NodeDaemon::RetryHeadLater() {
  head_retry_timer_.expires_after(std::chrono::seconds(1));
  head_retry_timer_.async_wait([this](const boost::system::error_code& e) {
    if (!e && !shutting_down_) ConnectHead();
  });
}

void NodeDaemon::ConnectHead() {
  auto socket = ConnectToAddress(io_, options_.head_address, "");
  if (!socket.ok()) {
    LUMEN_LOG(WARNING) << "cannot reach the head at " << options_.head_address << ": "
                       << socket.status().message() << "; retrying";
    RetryHeadLater();
    return;
  }
  head_conn_ = Connection::Create(std::move(*socket));
  head_conn_->Start([this](Connection&, proto::Envelope::Reader m) { OnHeadFrame(m); },
                    [this](Connection&, const absl::Status& why) {
                      if (shutting_down_) return;
                      LUMEN_LOG(WARNING) << "lost the head: " << why << "; reconnecting";
                      RetryHeadLater();
                    });
  {
    OutMessage out;
    InitHello(out.Init(), proto::Role::NODE);
    head_conn_->Send(out.builder());
  }
  OutMessage out;
  FillStats(out.Init().initRegisterNode());
  head_conn_->Send(out.builder());
  ReportToHead();
}

int NodeDaemon::PoolSize() const {
  return options_.prestart_workers >= 0
             ? options_.prestart_workers
             : static_cast<int>(resources_->total().Get(scheduler::kCPU));
}

void NodeDaemon::ReapIdleWorkers() {
  // Workers started beyond the pool (for nested or blocked tasks) exit once they
  // have been idle a while; the longest idle go first.
  auto timeout = std::chrono::milliseconds(options_.worker_idle_timeout_ms);
  auto now = std::chrono::steady_clock::now();
  for (auto& [job_id, job] : jobs_) {
    while (static_cast<int>(job.idle.size()) > PoolSize()) {
      auto wit = workers_.find(job.idle.front());
      if (wit == workers_.end()) {
        job.idle.pop_front();
        continue;
      }
      if (now - wit->second.idle_since < timeout) break;
      KillWorker(wit->second, "it was idle");  // reaped through SIGCHLD
      job.idle.pop_front();
    }
  }
  reap_timer_.expires_after(std::min(timeout, std::chrono::milliseconds(1000)));
  reap_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (!ec && !shutting_down_) ReapIdleWorkers();
  });
}

void NodeDaemon::ReportToHead() {
  report_timer_.expires_after(std::chrono::milliseconds(options_.report_period_ms));
  report_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec || shutting_down_ || !head_conn_ || head_conn_->closed()) return;
    OutMessage out;
    FillStats(out.Init().initReportNode());
    head_conn_->Send(out.builder());
    ReportToHead();
  });
}

void NodeDaemon::Shutdown(const std::string& why) {
  if (shutting_down_) return;
  shutting_down_ = true;
  LUMEN_LOG(DEBUG) << "node daemon stopping: " << why;
  if (head_conn_ && !head_conn_->closed()) {
    // Leaving on purpose: the head marks us dead now, without a warning.
    // (Best effort: sent now unless other frames are still queued.)
    OutMessage out;
    out.Init().setMarkNodeDead(DataOf(node_id_));
    std::string frame;
    AppendFrame(out.builder(), &frame);
    (void)head_conn_->TrySendNow(frame);
  }
  for (auto& [wid, w] : workers_) ::kill(w.pid, SIGKILL);
  for (auto& [wid, w] : workers_) {
    WaitForChildExit(w.pid, 2000);
    if (!w.address.empty()) ::unlink(ParseAddress(w.address).unix_path.c_str());
  }
  boost::system::error_code ignored;
  acceptor_.close(ignored);
  if (tcp_acceptor_) tcp_acceptor_->close(ignored);
  transfer_client_.reset();
  transfer_server_.reset();
  ::unlink(socket_path_.c_str());
  if (options_.remove_session_dir) std::filesystem::remove_all(options_.session_dir, ignored);
  io_.stop();
}

}  // namespace

int RunNodeDaemon(const NodeDaemonOptions& options) {
  NodeDaemon daemon(options);
  return daemon.Run();
}

}  // namespace lumen::runtime
