#include "core/runtime/cluster.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/sysinfo.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <optional>
#include <fstream>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "lumen/head/head_service.h"
#include "lumen/node/node_daemon.h"
#include "lumen/common/ids.h"
#include "lumen/common/logging.h"
#include "lumen/common/process.h"

namespace lumen::runtime {
namespace {

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

int EnvFd(const char* name) {
  int fd = -1;
  std::string v = Env(name);
  if (v.empty() || !absl::SimpleAtoi(v, &fd)) return -1;
  // Our own children must not inherit it.
  ::fcntl(fd, F_SETFD, FD_CLOEXEC);
  return fd;
}

std::string EncodeResources(const std::map<std::string, double>& resources) {
  std::string out;
  for (const auto& [name, qty] : resources) absl::StrAppend(&out, out.empty() ? "" : ",", name, "=", qty);
  return out;
}

std::map<std::string, double> DecodeResources(const std::string& text) {
  std::map<std::string, double> out;
  for (absl::string_view item : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    std::pair<std::string, std::string> kv = absl::StrSplit(item, absl::MaxSplits('=', 1));
    double qty = 0;
    if (absl::SimpleAtod(kv.second, &qty)) out[kv.first] = qty;
  }
  return out;
}

// Reads one "ready ..." / "error ..." line from a daemon's ready pipe.
absl::StatusOr<std::string> ReadReadyLine(int fd, const std::string& what, int timeout_ms) {
  std::string line;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (line.find('\n') == std::string::npos) {
    int left = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                    deadline - std::chrono::steady_clock::now())
                                    .count());
    if (left <= 0) return absl::DeadlineExceededError(what + " did not start in time");
    pollfd p{fd, POLLIN, 0};
    int r = ::poll(&p, 1, left);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) continue;
    char buf[512];
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return absl::UnavailableError(what + " exited during startup");
    line.append(buf, static_cast<size_t>(n));
  }
  line.resize(line.find('\n'));
  if (line.rfind("ready ", 0) == 0) return line.substr(6);
  return absl::UnavailableError(absl::StrCat(what, " failed to start: ", line));
}

// A daemon spawned and not yet ready: its pid and the read end of its ready pipe.
struct Starting {
  pid_t pid = -1;
  int ready_fd = -1;
};

// Spawns `role` with its ready pipe (and `extra_fds` kept open in it).
absl::StatusOr<Starting> StartDaemon(const ClusterSpec& spec, const std::string& session_dir,
                                     const std::string& role,
                                     std::vector<std::pair<std::string, std::string>> env,
                                     int parent_read_fd, std::vector<int> extra_fds = {}) {
  int ready_pipe[2];
  if (auto s = MakePipe(ready_pipe); !s.ok()) return s;
  SpawnOptions options;
  options.executable = spec.executable.empty() ? SelfExecutablePath() : spec.executable;
  options.env = std::move(env);
  options.env.emplace_back("LUMEN_ROLE", role);
  options.env.emplace_back("LUMEN_SESSION_DIR", session_dir);
  options.env.emplace_back("LUMEN_READY_FD", std::to_string(ready_pipe[1]));
  options.env.emplace_back("LUMEN_PARENT_FD",
                           parent_read_fd >= 0 ? std::to_string(parent_read_fd) : "");
  options.keep_fds = {ready_pipe[1]};
  if (parent_read_fd >= 0) options.keep_fds.push_back(parent_read_fd);
  for (int fd : extra_fds) options.keep_fds.push_back(fd);
  // Daemons get a session of their own: a signal to the driver's process group
  // (Ctrl-C, a test runner's timeout) reaches the driver only, and the daemons
  // then notice it gone and clean up, instead of dying with nobody cleaning up.
  options.new_session = true;
  if (!spec.embedded) options.log_path = session_dir + "/logs/" + role + ".log";
  auto pid = SpawnProcess(options);
  ::close(ready_pipe[1]);
  if (!pid.ok()) {
    ::close(ready_pipe[0]);
    return pid.status();
  }
  return Starting{*pid, ready_pipe[0]};
}

// Waits for `daemon`'s ready line (its address); kills it if none comes.
absl::StatusOr<std::string> AwaitReady(const Starting& daemon, const std::string& role) {
  auto line = ReadReadyLine(daemon.ready_fd, "the " + role + " daemon", 20000);
  ::close(daemon.ready_fd);
  if (!line.ok()) {
    ::kill(daemon.pid, SIGKILL);
    WaitForChildExit(daemon.pid, 2000);
  }
  return line;
}

// The head's address, for a node started beside it: read from LUMEN_HEAD_ADDRESS_FD
// (a socket; one line, written once the head is ready; EOF: it did not start).
absl::StatusOr<std::string> ReadHeadAddress(int fd) {
  std::string line;
  char buf[256];
  while (line.find('\n') == std::string::npos) {
    // The starter waits at most 20 s for the head (AwaitReady) and closes its
    // end when it gives up or exits: EOF ends this wait.
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return absl::UnavailableError("the head did not start");
    line.append(buf, static_cast<size_t>(n));
  }
  line.resize(line.find('\n'));
  return line;
}

}  // namespace

double DetectCpus() {
  unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : n;
}

double DetectGpus() {
  // NVIDIA's driver lists one directory per device; no driver, no GPUs. (Tests
  // and machines without a driver declare GPUs with --num-gpus.)
  std::error_code ec;
  int count = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/driver/nvidia/gpus", ec)) {
    (void)entry;
    ++count;
  }
  return count;
}

uint64_t DetectMemoryBytes() {
  struct sysinfo info;
  if (::sysinfo(&info) != 0) return 1ull << 30;
  return static_cast<uint64_t>(info.totalram) * info.mem_unit;
}

absl::StatusOr<ClusterProcesses> StartCluster(const ClusterSpec& spec) {
  ClusterProcesses cluster;
  char stamp[32];
  std::time_t now = std::time(nullptr);
  std::tm tm;
  localtime_r(&now, &tm);
  std::strftime(stamp, sizeof(stamp), "%Y%m%d-%H%M%S", &tm);
  cluster.session_dir = absl::StrCat(TempRoot(), "/lumen-session-", stamp, "-", ::getpid(), "-",
                                     JobId::Random().Hex().substr(0, 6));
  std::error_code ec;
  std::filesystem::create_directories(cluster.session_dir + "/sockets", ec);
  if (!spec.embedded) std::filesystem::create_directories(cluster.session_dir + "/logs", ec);
  if (ec) {
    return absl::InternalError(
        absl::StrCat("cannot create session directory ", cluster.session_dir, ": ", ec.message()));
  }
  std::filesystem::permissions(cluster.session_dir, std::filesystem::perms::owner_all,
                               std::filesystem::perm_options::replace, ec);

  int parent_pipe[2] = {-1, -1};
  if (spec.embedded) {
    if (auto s = MakePipe(parent_pipe); !s.ok()) return s;
    cluster.parent_pipe = parent_pipe[1];
  }
  auto fail = [&](absl::Status status) -> absl::StatusOr<ClusterProcesses> {
    if (parent_pipe[0] >= 0) ::close(parent_pipe[0]);
    StopCluster(cluster);
    std::filesystem::remove_all(cluster.session_dir, ec);
    return status;
  };

  // The node starts beside the head (its exec and start overlap the head's;
  // issue 8, init_seconds) and reads the head's address from a socket once
  // the head is ready; a node joining a running head gets the address at once.
  std::map<std::string, double> resources = spec.resources;
  uint64_t store = 0;
  if (spec.start_node) {
    if (!resources.contains("CPU")) resources["CPU"] = DetectCpus();
    if (!resources.contains("GPU") && DetectGpus() > 0) resources["GPU"] = DetectGpus();
    uint64_t ram = DetectMemoryBytes();
    store = spec.object_store_bytes ? spec.object_store_bytes : ram * 3 / 10;
    if (!resources.contains("memory")) resources["memory"] = static_cast<double>(ram - std::min(ram, store));
  }
  std::optional<Starting> head;
  if (spec.start_head) {
    std::vector<std::pair<std::string, std::string>> env = {
        {"LUMEN_HEAD_HOST", spec.head_host},
        {"LUMEN_HEAD_PORT", std::to_string(spec.head_port)},
        {"LUMEN_TOKEN", spec.token},
        {"LUMEN_METRICS_PORT", std::to_string(spec.metrics_port)},
        {"LUMEN_METRICS_HOST", spec.metrics_host}};
    // Set only when asked: otherwise what this process has passes through.
    if (!spec.head_persistence.empty()) env.emplace_back("LUMEN_HEAD_PERSISTENCE", spec.head_persistence);
    if (!spec.head_external_storage.empty()) {
      env.emplace_back("LUMEN_HEAD_EXTERNAL_STORAGE", spec.head_external_storage);
    }
    if (!spec.head_state_dir.empty()) env.emplace_back("LUMEN_HEAD_STATE_DIR", spec.head_state_dir);
    auto started = StartDaemon(spec, cluster.session_dir, "head", std::move(env), parent_pipe[0]);
    if (!started.ok()) return fail(started.status());
    cluster.pids.push_back(started->pid);
    head = *started;
  } else {
    cluster.head_address = spec.head_address;
  }

  std::optional<Starting> node;
  // A socket pair rather than a pipe: a node that failed before reading
  // must not kill this process with SIGPIPE (send's MSG_NOSIGNAL).
  int head_address_pipe[2] = {-1, -1};
  if (spec.start_node) {
    if (head && ::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, head_address_pipe) != 0) {
      absl::Status s = absl::InternalError(absl::StrCat("socketpair: ", std::strerror(errno)));
      ::close(head->ready_fd);
      return fail(s);
    }
    auto started = StartDaemon(
        spec, cluster.session_dir, "node",
        {{"LUMEN_HEAD_ADDRESS", cluster.head_address},
         {"LUMEN_HEAD_ADDRESS_FD", head ? std::to_string(head_address_pipe[0]) : ""},
         {"LUMEN_TOKEN", spec.token},
         {"LUMEN_NODE_HOST", spec.node_host},
         {"LUMEN_NODE_RESOURCES", EncodeResources(resources)},
         {"LUMEN_OBJECT_STORE_BYTES", std::to_string(store)},
         {"LUMEN_OBJECT_SPILLING_DIRECTORY",
          spec.spill_dir.empty() ? Env("LUMEN_OBJECT_SPILLING_DIRECTORY") : spec.spill_dir},
         {"LUMEN_REMOVE_SESSION_DIR", spec.embedded ? "1" : ""},
         {"LUMEN_MEMORY_BUDGET_BYTES", spec.memory_budget_bytes
                                           ? std::to_string(spec.memory_budget_bytes)
                                           : Env("LUMEN_MEMORY_BUDGET_BYTES")}},
        parent_pipe[0],
        head ? std::vector<int>{head_address_pipe[0]} : std::vector<int>{});
    if (head_address_pipe[0] >= 0) ::close(head_address_pipe[0]);
    if (!started.ok()) {
      if (head_address_pipe[1] >= 0) ::close(head_address_pipe[1]);
      if (head) ::close(head->ready_fd);
      return fail(started.status());
    }
    cluster.pids.push_back(started->pid);
    node = *started;
  }

  if (head) {
    auto address = AwaitReady(*head, "head");
    if (address.ok() && head_address_pipe[1] >= 0) {
      std::string line = *address + "\n";
      if (::send(head_address_pipe[1], line.data(), line.size(), MSG_NOSIGNAL) < 0) {
        // It failed on its own: its ready line (AwaitReady below) says why.
        LUMEN_LOG(DEBUG) << "the node did not take the head's address: " << std::strerror(errno);
      }
    }
    // Closed either way: without the address the node ends its start.
    if (head_address_pipe[1] >= 0) ::close(head_address_pipe[1]);
    if (!address.ok()) {
      if (node) ::close(node->ready_fd);
      return fail(address.status());
    }
    cluster.head_address = *address;
    // Marks the node started with the head: drivers on this machine attach to it.
    std::ofstream(cluster.session_dir + "/head_node").flush();
  }

  if (!spec.start_node) {
    if (parent_pipe[0] >= 0) ::close(parent_pipe[0]);
    return cluster;
  }
  auto socket = AwaitReady(*node, "node");
  if (!socket.ok()) return fail(socket.status());
  cluster.node_socket = *socket;
  if (parent_pipe[0] >= 0) ::close(parent_pipe[0]);
  if (!spec.token.empty() && spec.start_head) {
    // The token, for this user only: nodes and drivers on this machine read it.
    cluster.token_file = cluster.session_dir + "/token";
    int fd = ::open(cluster.token_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    ssize_t written = fd >= 0 ? ::write(fd, spec.token.data(), spec.token.size()) : -1;
    if (written != static_cast<ssize_t>(spec.token.size())) {
      // Drivers on this machine then need --token / LUMEN_TOKEN / Config::token.
      LUMEN_LOG(WARNING) << "cannot write the cluster token to " << cluster.token_file << ": "
                         << std::strerror(errno);
    }
    if (fd >= 0) ::close(fd);
  }
  if (!spec.embedded) {
    std::ofstream pids(cluster.session_dir + "/cluster.pids");
    for (pid_t p : cluster.pids) pids << p << "\n";
    std::ofstream head(cluster.session_dir + "/head_address");
    head << cluster.head_address << "\n";
  }
  return cluster;
}

void StopCluster(ClusterProcesses& cluster) {
  if (cluster.parent_pipe >= 0) {
    ::close(cluster.parent_pipe);
    cluster.parent_pipe = -1;
  }
  // Node daemons first: they stop their workers and clean up.
  for (auto it = cluster.pids.rbegin(); it != cluster.pids.rend(); ++it) {
    if (!WaitForChildExit(*it, 5000)) {
      ::kill(*it, SIGKILL);
      WaitForChildExit(*it, 2000);
    }
  }
  cluster.pids.clear();
  std::error_code ec;
  if (!cluster.session_dir.empty()) std::filesystem::remove_all(cluster.session_dir, ec);
}

void MaybeRunClusterProcess() {
  std::string role = Env("LUMEN_ROLE");
  if (role == "head") {
    head::HeadOptions options;  // timeouts and limits: from the environment
    options.host = Env("LUMEN_HEAD_HOST").empty() ? "127.0.0.1" : Env("LUMEN_HEAD_HOST");
    if (!absl::SimpleAtoi(Env("LUMEN_HEAD_PORT"), &options.port)) options.port = 0;
    options.parent_fd = EnvFd("LUMEN_PARENT_FD");
    options.ready_fd = EnvFd("LUMEN_READY_FD");
    options.session_dir = Env("LUMEN_SESSION_DIR");
    options.token = Env("LUMEN_TOKEN");
    if (!absl::SimpleAtoi(Env("LUMEN_METRICS_PORT"), &options.metrics_port)) options.metrics_port = -1;
    if (!Env("LUMEN_METRICS_HOST").empty()) options.metrics_host = Env("LUMEN_METRICS_HOST");
    head::ReadPersistenceFromEnv(&options);
    std::_Exit(head::RunHeadService(options));
  }
  if (role == "node") {
    node::NodeDaemonOptions options;  // timeouts: Timeouts::FromEnv()
    options.session_dir = Env("LUMEN_SESSION_DIR");
    options.head_address = Env("LUMEN_HEAD_ADDRESS");
    if (int fd = EnvFd("LUMEN_HEAD_ADDRESS_FD"); fd >= 0) {
      // Started beside its head (StartCluster): the address comes once the
      // head is ready. (Reading it later, inside the node's Setup, gained
      // nothing measurable: the node's own exec and start outlast the head's.)
      auto head = ReadHeadAddress(fd);
      ::close(fd);
      ::unsetenv("LUMEN_HEAD_ADDRESS_FD");  // not for its workers
      if (!head.ok()) {
        std::string line = absl::StrCat("error ", head.status().message(), "\n");
        int ready_fd = EnvFd("LUMEN_READY_FD");
        if (ready_fd >= 0 && ::write(ready_fd, line.data(), line.size()) < 0) {
          LUMEN_LOG(ERROR) << "cannot tell the starter: " << std::strerror(errno);
        }
        std::_Exit(1);
      }
      options.head_address = *head;
    }
    if (!Env("LUMEN_NODE_HOST").empty()) options.host = Env("LUMEN_NODE_HOST");
    options.resources = DecodeResources(Env("LUMEN_NODE_RESOURCES"));
    uint64_t bytes = 0;
    options.object_store_bytes =
        absl::SimpleAtoi(Env("LUMEN_OBJECT_STORE_BYTES"), &bytes) ? bytes : (1ull << 30);
    options.spill_dir = Env("LUMEN_OBJECT_SPILLING_DIRECTORY");
    options.parent_fd = EnvFd("LUMEN_PARENT_FD");
    options.ready_fd = EnvFd("LUMEN_READY_FD");
    options.remove_session_dir = !Env("LUMEN_REMOVE_SESSION_DIR").empty();
    int prestart = -1;
    if (absl::SimpleAtoi(Env("LUMEN_PRESTART_WORKERS"), &prestart)) options.prestart_workers = prestart;
    if (absl::SimpleAtoi(Env("LUMEN_MEMORY_BUDGET_BYTES"), &bytes)) options.memory_budget_bytes = bytes;
    int64_t ms = 0;
    if (absl::SimpleAtoi(Env("LUMEN_MEMORY_MONITOR_PERIOD_MS"), &ms) && ms > 0) {
      options.memory_monitor_period = std::chrono::milliseconds(ms);
    }
    if (absl::SimpleAtoi(Env("LUMEN_MEMORY_KILL_BACKOFF_MS"), &ms) && ms >= 0) {
      options.memory_kill_backoff = std::chrono::milliseconds(ms);
    }
    std::_Exit(node::RunNodeDaemon(options));
  }
}

}  // namespace lumen::runtime
