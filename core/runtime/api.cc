// The user API's non-template half: Init/Shutdown, the function registry, and
// the internal:: entry points that lumen.h's templates call.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "core/runtime/cluster.h"
#include "core/runtime/progress_bar.h"
#include "lumen/worker/core_worker.h"
#include "lumen/common/address.h"
#include "lumen/common/head_client.h"
#include "lumen/common/head_connection_pool.h"
#include "lumen/common/logging.h"
#include "lumen/common/mutex_mode.h"
#include "lumen/common/proto_util.h"
#include "lumen/common/timeouts.h"
#include "lumen/lumen.h"
#include "lumen/node/worker_template.h"

namespace lumen {
namespace internal {
namespace {

// The driver's runtime and, for an embedded cluster, its processes.
struct DriverState {
  // Shared with the threads in a call (CurrentCoreWorker), so Shutdown never
  // frees it under them.
  std::shared_ptr<runtime::CoreWorker> core;
  std::optional<runtime::ClusterProcesses> cluster;
  std::string head_address;
};

// Held by Init and Shutdown for their whole run (so neither runs while the
// other is half done) and by the readers of the state. Never freed (nor the
// state): Shutdown runs at exit too, after other statics may be gone.
ABSL_CONST_INIT absl::Mutex state_mu(absl::kConstInit);
DriverState* const driver_state ABSL_PT_GUARDED_BY(state_mu) = new DriverState();

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

// The runtime, kept alive by the returned pointer for the whole call.
std::shared_ptr<runtime::CoreWorker> Core() {
  std::shared_ptr<runtime::CoreWorker> core = runtime::CurrentCoreWorker();
  if (core == nullptr) throw Error("lumen is not initialized: call lumen::Init first");
  return core;
}

[[noreturn]] void RunWorker() {
  logging::SetProcessTag("worker");
  runtime::CoreWorkerOptions options;
  options.is_worker = true;
  options.node_socket = Env("LUMEN_NODE_SOCKET");
  if (!Env("LUMEN_NODE_HOST").empty()) options.node_host = Env("LUMEN_NODE_HOST");
  options.session_dir = Env("LUMEN_SESSION_DIR");
  options.worker_id = WorkerId::FromHex(Env("LUMEN_WORKER_ID"));
  options.job_id = JobId::FromHex(Env("LUMEN_JOB_ID"));
  options.head_address = Env("LUMEN_HEAD_ADDRESS");
  auto core = runtime::CoreWorker::Start(options);
  if (!core.ok()) {
    LUMEN_LOG(ERROR) << "worker cannot start: " << core.status();
    std::_Exit(1);
  }
  std::shared_ptr<runtime::CoreWorker> worker = std::move(*core);
  runtime::SetCurrentCoreWorker(worker);
  worker->RunTaskLoop();
  runtime::SetCurrentCoreWorker(nullptr);
  std::fflush(stdout);
  std::fflush(stderr);
  // Leave without running the user's static destructors: the task thread of a
  // dying node may still be inside user code.
  std::_Exit(0);
}

}  // namespace

std::shared_ptr<RefHandle> SubmitTask(std::string_view function, std::vector<TaskArgument> args,
                                      const TaskOptions& options) {
  return Core()->SubmitTask(function, std::move(args), options);
}

std::shared_ptr<RefHandle> PutEncoded(std::string encoded, const std::source_location& where) {
  return Core()->PutEncoded(std::move(encoded), where);
}

std::shared_ptr<RefHandle> PutWithWriter(uint64_t size, const std::function<void(uint8_t*)>& write,
                                         const std::source_location& where) {
  return Core()->PutWithWriter(size, write, where);
}

namespace {
// A driver, not a worker (workers run with LUMEN_ROLE=worker): only a driver
// draws progress on its terminal.
bool IsDriverProcess() {
  const char* role = std::getenv("LUMEN_ROLE");
  return role == nullptr || *role == '\0';
}
}  // namespace

std::vector<ObjectBytes> GetObjects(const std::vector<const RefHandle*>& refs,
                                    std::optional<std::chrono::milliseconds> timeout) {
  auto core = Core();
  // A driver waiting long for many refs on a terminal shows how far it got.
  if (refs.size() < ProgressBar::kMinRefs || !IsDriverProcess() ||
      !ProgressBar::OnTerminal()) {
    return core->Get(refs, timeout);
  }
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  const auto show_after = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::duration<double>(ProgressBar::kShowAfterSeconds));
  auto left = [&]() -> std::optional<std::chrono::milliseconds> {
    if (!timeout) return std::nullopt;
    auto spent = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
    return std::max(std::chrono::milliseconds(0), *timeout - spent);
  };
  auto wait = [&](std::chrono::milliseconds most) {
    auto limit = left();
    return core->Wait(refs, refs.size(), limit ? std::min(*limit, most) : most);
  };
  auto count = [](const std::vector<bool>& ready) {
    return static_cast<size_t>(std::count(ready.begin(), ready.end(), true));
  };
  std::vector<bool> ready = wait(show_after);
  ProgressBar bar(refs.size());
  bool drawn = false;
  while (count(ready) < refs.size() && (!timeout || left()->count() > 0)) {
    double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    std::fputs(bar.Render(count(ready), seconds).c_str(), stderr);
    drawn = true;
    ready = wait(std::chrono::milliseconds(200));  // the bar's redraw period, not a deadline
  }
  if (drawn) std::fputs(bar.Clear().c_str(), stderr);
  return core->Get(refs, left());
}

std::vector<bool> WaitObjects(const std::vector<const RefHandle*>& refs, size_t num_returns,
                              std::optional<std::chrono::milliseconds> timeout) {
  return Core()->Wait(refs, num_returns, timeout);
}

void ThrowDecodeError(const std::string& message, bool type_mismatch) {
  if (type_mismatch) throw TypeMismatchError(message);
  throw Error("cannot decode object: " + message);
}

std::shared_ptr<RefHandle> CreateActor(std::string_view factory, std::vector<TaskArgument> args,
                                       const ActorOptions& options) {
  return Core()->CreateActor(factory, std::move(args), options);
}

std::shared_ptr<RefHandle> SubmitActorTask(const std::shared_ptr<RefHandle>& actor,
                                           std::string_view method,
                                           std::vector<TaskArgument> args) {
  return Core()->SubmitActorTask(actor, method, std::move(args));
}

void KillActor(const RefHandle& actor, bool no_restart) { Core()->KillActor(actor, no_restart); }

void CancelTask(const RefHandle& ref, bool force) { Core()->CancelTask(ref, force); }

std::shared_ptr<RefHandle> GetNamedActor(const std::string& name) {
  return Core()->GetNamedActor(name);
}

void ExitActorAfterCall() { Core()->ExitActorAfterCall(); }

void InitRuntime(const Config& config, int argc, char** argv) {
  ConfigureMutexDeadlockDetection();  // every role: head, node, worker, driver
  runtime::MaybeRunClusterProcess();
  // A worker template serves forks here; each forked worker goes on as a worker.
  node::MaybeServeWorkerForks();
  if (Env("LUMEN_ROLE") == "worker") RunWorker();

  absl::MutexLock lock(&state_mu);
  DriverState& state = *driver_state;
  if (state.core) throw Error("lumen::Init was already called");
  std::string address = config.address.empty() ? Env("LUMEN_ADDRESS") : config.address;
  if (!config.token.empty()) runtime::SetHeadToken(config.token);
  runtime::CoreWorkerOptions options;
  if (address.empty()) {
    runtime::ClusterSpec spec;
    spec.embedded = true;
    if (config.num_cpus) spec.resources["CPU"] = *config.num_cpus;
    if (config.num_gpus) spec.resources["GPU"] = *config.num_gpus;  // 0: none, even if detected
    if (config.memory) spec.resources["memory"] = static_cast<double>(*config.memory);
    for (const auto& [k, v] : config.resources) spec.resources[k] = v;
    if (config.object_store_memory) spec.object_store_bytes = *config.object_store_memory;
    auto cluster = runtime::StartCluster(spec);
    if (!cluster.ok()) {
      throw Error(absl::StrCat("lumen::Init: cannot start a local cluster: ",
                               cluster.status().message()));
    }
    state.cluster = std::move(*cluster);
    state.head_address = state.cluster->head_address;
    options.node_socket = ParseAddress(state.cluster->node_socket).unix_path;
    options.session_dir = state.cluster->session_dir;
  } else {
    auto node = runtime::FindLocalNode(address);
    if (!node.ok()) {
      throw Error(absl::StrCat("lumen::Init: cannot join the cluster at ", address, ": ",
                               node.status().message()));
    }
    options.node_socket = ParseAddress(node->address).unix_path;
    if (!node->host.empty()) options.node_host = node->host;
    auto head = runtime::ResolveHeadAddress(address);
    if (!head.ok()) {
      throw Error(absl::StrCat("lumen::Init: cannot join the cluster at ", address, ": ",
                               head.status().message()));
    }
    state.head_address = *head;
    options.session_dir = node->session_dir;
  }
  options.head_address = state.head_address;
  options.log_to_driver = config.log_to_driver && Env("LUMEN_LOG_TO_DRIVER") != "0";
  auto core = runtime::CoreWorker::Start(options);
  if (!core.ok()) {
    if (state.cluster) runtime::StopCluster(*state.cluster);
    state.cluster.reset();
    throw Error(absl::StrCat("lumen::Init: ", core.status().message()));
  }
  state.core = std::move(*core);
  runtime::SetCurrentCoreWorker(state.core);
  static bool atexit_registered = false;
  if (!atexit_registered) {
    atexit_registered = true;
    std::atexit([] { ShutdownRuntime(); });
  }
}

void ShutdownRuntime() {
  absl::MutexLock lock(&state_mu);
  DriverState& state = *driver_state;
  runtime::SetCurrentCoreWorker(nullptr);
  if (state.core) state.core->Stop();
  state.core.reset();
  if (state.cluster) runtime::StopCluster(*state.cluster);
  state.cluster.reset();
  state.head_address.clear();
  runtime::HeadConnectionPool::Instance().Clear();  // no idle link to a head we left
}

bool RuntimeInitialized() { return runtime::CurrentCoreWorker() != nullptr; }

std::string ClusterAddress() {
  absl::MutexLock lock(&state_mu);
  return driver_state->head_address;
}

namespace {

std::string HeadForCalls() {
  auto core = runtime::CurrentCoreWorker();
  std::string head = core ? ClusterAddress() : "";
  if (head.empty() && core) head = core->head_address();
  if (head.empty()) throw Error("lumen is not initialized: call lumen::Init first");
  if (core) core->FlushHeldReplies();  // a group's Wait may need them at their owner
  return head;
}

// One placement group request to the head; returns the group's state. A
// Wait the head parks passes `wait` (its timeout): the reply may take that
// plus Timeouts::parked_reply_margin; others get Timeouts::head_call_timeout.
PlacementGroupInfo CallGroup(const std::function<void(proto::Envelope::Builder)>& fill,
                             std::string* error = nullptr,
                             std::optional<std::chrono::milliseconds> wait = std::nullopt) {
  std::optional<std::chrono::milliseconds> reply_timeout;
  if (wait) {
    reply_timeout = ClampTimeout(*wait) + runtime::CallTimeouts().parked_reply_margin;
  }
  auto reply = runtime::CallHead(HeadForCalls(), fill, reply_timeout);
  if (!reply.ok()) {
    throw PlacementGroupError(absl::StrCat("placement group request failed: ", reply.status().message()));
  }
  PlacementGroupInfo info;
  absl::Status read = runtime::ReadReply(*reply, "the head", [&](proto::Envelope::Reader env) {
    if (env.isAck()) return absl::OkStatus();
    if (!env.isPlacementGroupState()) return runtime::UnexpectedReply("the head");
    auto state = env.getPlacementGroupState();
    info.state = state.getState().cStr();
    for (auto b : state.getBundles()) {
      info.bundle_nodes.push_back(b.getNodeId().size() ? IdFrom<NodeId>(b.getNodeId()).Hex() : "");
    }
    if (error) *error = state.getError().cStr();
    return absl::OkStatus();
  });
  if (!read.ok()) throw PlacementGroupError(std::string(read.message()));
  return info;
}

}  // namespace

std::string CreatePlacementGroup(const PlacementGroupRequest& request) {
  if (request.bundles.empty()) throw PlacementGroupError("a placement group needs at least one bundle");
  for (size_t i = 0; i < request.bundles.size(); ++i) {
    if (request.bundles[i].empty()) {
      throw PlacementGroupError(absl::StrCat("bundle ", i, " of the placement group is empty"));
    }
  }
  std::string id = JobId::Random().Hex() + JobId::Random().Hex().substr(0, 8);
  std::string refusal;
  auto created = CallGroup([&](proto::Envelope::Builder env) {
    auto spec = env.initCreatePlacementGroup();
    spec.setGroupId(BytesOf(id));
    spec.setName(request.name.empty() ? id.substr(0, 12) : request.name);
    spec.setStrategy(static_cast<proto::PlacementStrategy>(request.strategy));
    auto bundles = spec.initBundles(request.bundles.size());
    for (size_t i = 0; i < request.bundles.size(); ++i) {
      bundles[i].setIndex(static_cast<int32_t>(i));
      SetResources(bundles[i].initResources(request.bundles[i].size()), request.bundles[i]);
    }
  }, &refusal);
  if (created.state == "REMOVED") {
    // The head refused it (a limit); it holds nothing of it.
    throw PlacementGroupError(absl::StrCat("cannot create placement group: ", refusal));
  }
  return id;
}

bool WaitPlacementGroup(const std::string& group_id, std::chrono::milliseconds timeout) {
  std::string error;
  auto info = CallGroup(
      [&](proto::Envelope::Builder env) {
        auto wait = env.initWaitPlacementGroup();
        wait.setGroupId(BytesOf(group_id));
        wait.setTimeoutMs(static_cast<uint64_t>(std::max<int64_t>(0, timeout.count())));
      },
      &error, timeout);
  if (info.state == "REMOVED") {
    throw PlacementGroupError(absl::StrCat("placement group ", group_id, " was removed",
                                           error.empty() ? "" : " (" + error + ")"));
  }
  return info.state == "CREATED";
}

void RemovePlacementGroup(const std::string& group_id) {
  CallGroup([&](proto::Envelope::Builder env) { env.setRemovePlacementGroup(BytesOf(group_id)); });
}

PlacementGroupInfo GetPlacementGroupInfo(const std::string& group_id) {
  return CallGroup([&](proto::Envelope::Builder env) {
    auto wait = env.initWaitPlacementGroup();
    wait.setGroupId(BytesOf(group_id));
    wait.setTimeoutMs(0);
  });
}

}  // namespace internal

namespace {

std::vector<runtime::NodeView> QueryClusterNodes() {
  auto core = runtime::CurrentCoreWorker();
  std::string head = core ? internal::ClusterAddress() : "";
  if (head.empty() && core) head = core->head_address();
  if (head.empty()) throw Error("lumen is not initialized: call lumen::Init first");
  auto nodes = runtime::QueryNodes(head);
  if (!nodes.ok()) throw Error(std::string(nodes.status().message()));
  return *nodes;
}

}  // namespace

std::map<std::string, double> ClusterResources() {
  std::map<std::string, double> total;
  for (const auto& node : QueryClusterNodes()) {
    if (!node.alive) continue;
    for (const auto& [name, qty] : node.total) total[name] += qty;
  }
  return total;
}

std::map<std::string, double> AvailableResources() {
  std::map<std::string, double> available;
  for (const auto& node : QueryClusterNodes()) {
    if (!node.alive) continue;
    for (const auto& [name, qty] : node.available) available[name] += qty;
  }
  return available;
}

std::vector<NodeInfo> Nodes() {
  std::vector<NodeInfo> out;
  for (const auto& node : QueryClusterNodes()) {
    out.push_back(NodeInfo{node.id.Hex(), node.address, node.alive, node.total});
  }
  return out;
}

std::string GetNodeId() {
  return internal::Core()->node_id().Hex();
}

std::vector<int> GetGpuIds() { return runtime::CoreWorker::CurrentGpuIds(); }

void Init(int argc, char** argv) { internal::InitRuntime(Config{}, argc, argv); }
void Init(const Config& config) { internal::InitRuntime(config, 0, nullptr); }
void Init(const Config& config, int argc, char** argv) {
  internal::InitRuntime(config, argc, argv);
}
void Shutdown() { internal::ShutdownRuntime(); }
bool IsInitialized() { return internal::RuntimeInitialized(); }

}  // namespace lumen
