#include "core/runtime/node_daemon.h"

#include "core/runtime/head_client.h"

#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio.hpp>
#include <deque>
#include <filesystem>
#include <memory>
#include <optional>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "lumen/common/connection.h"
#include "lumen/common/proto_util.h"
#include "lumen/common/ids.h"
#include "lumen/common/logging.h"
#include "lumen/common/process.h"
#include "lumen/objectstore/fd_passing.h"
#include "lumen/objectstore/object_table.h"
#include "lumen/objectstore/shm_segment.h"
#include "lumen/scheduler/gpu_assigner.h"
#include "lumen/scheduler/resource_set.h"

namespace lumen::runtime {
namespace {

namespace asio = boost::asio;
using scheduler::LocalResourceManager;
using scheduler::ResourceSet;

// What a connected client is, learned from its hello.
struct Client {
  bool hello_done = false;
  proto::Role role = proto::Role::CLI;
  JobId job;
  WorkerId worker;
};

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
  };
  struct Job {
    std::string exe_path;
    uint64_t driver_conn = 0;
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
  };
  struct LeaseRequest {
    std::weak_ptr<Connection> conn;
    uint64_t request_id = 0;
    ResourceSet resources;  // held by the lease
    ResourceSet placement;  // must be free to grant it
    JobId job;
    bool detached = false;
  };

  absl::Status Setup();
  void AcceptNext();
  void OnFrame(Connection& conn, proto::Envelope::Reader msg);
  void OnClose(Connection& conn, const absl::Status& why);
  void OnHello(Connection& conn, proto::Hello::Reader hello);
  void OnStoreRequest(Connection& conn, proto::Envelope::Reader msg);
  void StartWorker(const JobId& job_id);
  void DispatchLeases();
  void ReleaseLease(uint64_t lease_id);
  void FreeLeaseResources(const Lease& lease);
  void AskHoldersForIdleLeases(uint64_t requester);
  void ReapChildren();
  void OnWorkerGone(Worker& worker, const std::string& why);
  void KillJobWorkers(const JobId& job_id);
  bool IsDetached(const Worker& w) const;
  void RefuseLease(Connection& conn, uint64_t request_id, const std::string& why);
  void FailJobLeaseRequests(const JobId& job_id, const std::string& why);
  void FillStats(proto::NodeStats::Builder stats);
  void ConnectHead();
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
  absl::flat_hash_map<WorkerId, Worker> workers_;
  absl::flat_hash_map<pid_t, WorkerId> worker_pids_;
  absl::flat_hash_map<JobId, Job> jobs_;
  absl::flat_hash_map<uint64_t, Lease> leases_;
  std::deque<LeaseRequest> lease_queue_;
  absl::flat_hash_map<ObjectId, JobId> object_jobs_;  // which job created each object
  uint64_t next_lease_id_ = 1;
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
    std::string line = absl::StrCat("ready ", socket_path_, "\n");
    ssize_t ignored = ::write(options_.ready_fd, line.data(), line.size());
    (void)ignored;
    ::close(options_.ready_fd);
  }
  LUMEN_LOG(INFO) << "node " << node_id_.Hex().substr(0, 12) << " serving on " << socket_path_
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
    auto conn = Connection::Create(Socket(io_, asio::generic::stream_protocol(AF_UNIX, 0), fd));
    conn->context() = Client{};
    clients_[conn->id()] = conn;
    conn->Start([this](Connection& c, proto::Envelope::Reader m) { OnFrame(c, m); },
                [this](Connection& c, const absl::Status& why) { OnClose(c, why); });
    AcceptNext();
  });
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
  client.role = hello.getRole();
  client.job = IdFrom<JobId>(hello.getJobId());
  client.worker = IdFrom<WorkerId>(hello.getWorkerId());
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
  reply.setOk(true);
  reply.setNodeId(DataOf(node_id_));
  reply.setStoreSize(segment_->size());
  reply.setSessionDir(options_.session_dir);
  reply.setJobId(DataOf(client.job));
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
    case proto::Envelope::REQUEST_LEASE: {
      std::map<std::string, double> wanted = ReadResources(msg.getRequestLease().getResources());
      std::map<std::string, double> placement =
          ReadResources(msg.getRequestLease().getPlacement());
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
      bool can_lease = (client.role == proto::Role::DRIVER || client.role == proto::Role::WORKER) &&
                       jobs_.contains(client.job);
      if (!can_lease || !request.ok() || !resources_->IsFeasible(*placement_set)) {
        RefuseLease(conn, msg.getRequestId(),
                    !can_lease ? std::string("only a driver or worker of a live job can lease")
                    : request.ok()
                        ? absl::StrCat("infeasible: the task needs ", placement_set->ToString(),
                                       " but this node has only ", resources_->total().ToString())
                        : std::string(request.status().message()));
        return;
      }
      lease_queue_.push_back(LeaseRequest{conn.weak_from_this(), msg.getRequestId(), *request,
                                          *placement_set, client.job,
                                          msg.getRequestLease().getDetached()});
      DispatchLeases();
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
          ::kill(wit->second.pid, SIGKILL);
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
      ResourceSet cpu;
      cpu.Set(scheduler::kCPU, lease.resources.Get(scheduler::kCPU));
      if (msg.isWorkerBlocked() && !lease.cpu_released) {
        // A worker waiting in Get gives its CPU back so its children can run.
        resources_->Release(cpu);
        lease.cpu_released = true;
        DispatchLeases();
      } else if (msg.isWorkerUnblocked() && lease.cpu_released) {
        // Take it back if free; otherwise run oversubscribed until the lease ends
        // (and the lease then gives back no CPU).
        if (resources_->TryAcquire(cpu)) lease.cpu_released = false;
      }
      return;
    }
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

void NodeDaemon::OnStoreRequest(Connection& conn, proto::Envelope::Reader msg) {
  objectstore::ClientId client = conn.id();
  const Client& client_info = std::any_cast<Client&>(conn.context());
  if (client_info.role != proto::Role::DRIVER && client_info.role != proto::Role::WORKER) {
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
    default:
      LUMEN_LOG(WARNING) << "ignoring an unexpected message from client " << conn.id();
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
  for (auto it = lease_queue_.begin(); it != lease_queue_.end();) {
    auto conn = it->conn.lock();
    if (!conn || conn->closed()) {
      it = lease_queue_.erase(it);
      continue;
    }
    auto jit = jobs_.find(it->job);
    if (jit == jobs_.end()) {
      it = lease_queue_.erase(it);
      continue;
    }
    Job& job = jit->second;
    if (!it->placement.IsSubsetOf(resources_->available())) {
      AskHoldersForIdleLeases(conn->id());
      ++it;
      continue;
    }
    // Drop idle workers that died since they were pooled.
    while (!job.idle.empty() && !workers_.contains(job.idle.front())) job.idle.pop_front();
    if (job.idle.empty()) {
      // Start enough workers for the requests of this job that fit right now.
      int waiting = 0;
      for (const auto& r : lease_queue_) waiting += r.job == it->job ? 1 : 0;
      if (job.starting < std::min(waiting, 64)) StartWorker(it->job);
      ++it;
      continue;
    }
    // The GPUs themselves: whole ones alone, fractions sharing one device.
    std::optional<std::vector<int>> gpu_ids = gpus_->Assign(it->resources.Get(scheduler::kGPU));
    if (!gpu_ids) {
      AskHoldersForIdleLeases(conn->id());
      ++it;
      continue;
    }
    resources_->TryAcquire(it->resources);
    WorkerId wid = job.idle.front();
    job.idle.pop_front();
    job.failed_starts = 0;
    Worker& w = workers_[wid];
    uint64_t lease_id = next_lease_id_++;
    w.state = WorkerState::kLeased;
    w.lease_id = lease_id;
    leases_[lease_id] = Lease{wid, it->resources, conn->id(), false, false, it->detached, *gpu_ids};
    OutMessage out;
    auto env = out.Init();
    env.setRequestId(it->request_id);
    auto reply = env.initLeaseReply();
    reply.setGranted(true);
    reply.setLeaseId(lease_id);
    reply.setWorkerId(DataOf(wid));
    reply.setWorkerAddress(w.address);
    reply.setWorkerPid(w.pid);
    auto ids = reply.initGpuIds(gpu_ids->size());
    for (size_t i = 0; i < gpu_ids->size(); ++i) ids.set(i, (*gpu_ids)[i]);
    conn->Send(out.builder());
    it = lease_queue_.erase(it);
  }
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
  resources_->Release(held);
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
    LUMEN_LOG(WARNING) << "closed connection " << id << ": " << why;
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
      ::kill(wit->second.pid, SIGKILL);
    }
  }
  if (client.role == proto::Role::DRIVER && jobs_.contains(client.job) &&
      jobs_[client.job].driver_conn == id) {
    // The job is over: its workers and its objects go with it, except detached
    // actors, which keep the job's entry (its binary) for their own work.
    KillJobWorkers(client.job);
    bool has_detached = false;
    for (const auto& [wid, w] : workers_) has_detached |= w.job == client.job && IsDetached(w);
    if (has_detached) {
      jobs_[client.job].driver_conn = 0;
      jobs_[client.job].idle.clear();
    } else {
      jobs_.erase(client.job);
    }
    for (auto oit = object_jobs_.begin(); oit != object_jobs_.end();) {
      if (oit->second == client.job) {
        store_->Delete(oit->first);
        object_jobs_.erase(oit++);
      } else {
        ++oit;
      }
    }
  } else if (client.role == proto::Role::WORKER) {
    auto wit = workers_.find(client.worker);
    if (wit != workers_.end()) {
      auto jit = jobs_.find(wit->second.job);
      if (jit != jobs_.end()) {
        auto& idle = jit->second.idle;
        idle.erase(std::remove(idle.begin(), idle.end(), client.worker), idle.end());
      }
      if (ProcessAlive(wit->second.pid)) ::kill(wit->second.pid, SIGKILL);
    }
  }
  auto keep = clients_[id];
  clients_.erase(id);
  asio::post(io_, [keep] {});
  DispatchLeases();
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
    if (w.job == job_id && !IsDetached(w)) ::kill(w.pid, SIGKILL);
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
    std::string why = WIFSIGNALED(status) ? absl::StrCat("killed by signal ", WTERMSIG(status))
                                          : absl::StrCat("exited with code ", WEXITSTATUS(status));
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
  if (!w.address.empty()) ::unlink(w.address.c_str());
}

void NodeDaemon::FillStats(proto::NodeStats::Builder stats) {
  stats.setNodeId(DataOf(node_id_));
  stats.setAddress(socket_path_);
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
  stats.setQueuedLeases(lease_queue_.size());
  stats.setActiveLeases(leases_.size());
  stats.setSessionDir(options_.session_dir);
}

void NodeDaemon::ConnectHead() {
  auto colon = options_.head_address.rfind(':');
  std::string host = options_.head_address.substr(0, colon);
  std::string port = options_.head_address.substr(colon + 1);
  asio::ip::tcp::resolver resolver(io_);
  boost::system::error_code ec;
  auto endpoints = resolver.resolve(host, port, ec);
  asio::ip::tcp::socket socket(io_);
  if (!ec) asio::connect(socket, endpoints, ec);
  if (ec) {
    LUMEN_LOG(WARNING) << "cannot reach the head at " << options_.head_address << ": "
                       << ec.message() << "; retrying";
    head_retry_timer_.expires_after(std::chrono::seconds(1));
    head_retry_timer_.async_wait([this](const boost::system::error_code& e) {
      if (!e && !shutting_down_) ConnectHead();
    });
    return;
  }
  socket.set_option(asio::ip::tcp::no_delay(true));
  auto protocol = socket.local_endpoint().protocol();
  int fd = socket.release();
  head_conn_ = Connection::Create(
      Socket(io_, asio::generic::stream_protocol(protocol.family(), protocol.protocol()), fd));
  head_conn_->Start([](Connection&, proto::Envelope::Reader) {},
                    [this](Connection&, const absl::Status& why) {
                      if (shutting_down_) return;
                      LUMEN_LOG(WARNING) << "lost the head: " << why << "; reconnecting";
                      head_retry_timer_.expires_after(std::chrono::seconds(1));
                      head_retry_timer_.async_wait([this](const boost::system::error_code& e) {
                        if (!e && !shutting_down_) ConnectHead();
                      });
                    });
  {
    OutMessage out;
    auto hello = out.Init().initHello();
    hello.setProtocolVersion(proto::PROTOCOL_VERSION);
    hello.setRole(proto::Role::NODE);
    hello.setPid(::getpid());
    hello.setToken(HeadToken());
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
      ::kill(wit->second.pid, SIGKILL);  // reaped through SIGCHLD
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
  for (auto& [wid, w] : workers_) ::kill(w.pid, SIGKILL);
  for (auto& [wid, w] : workers_) {
    WaitForChildExit(w.pid, 2000);
    if (!w.address.empty()) ::unlink(w.address.c_str());
  }
  boost::system::error_code ignored;
  acceptor_.close(ignored);
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
