#include "test/core/test_support.h"

#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "core/runtime/cluster.h"
#include "lumen/common/head_client.h"
#include "lumen/common/process.h"

namespace lumen::test {

Config ScopedCluster::DefaultConfig() {
  Config config;
  config.num_cpus = 2;
  config.object_store_memory = 512ull << 20;
  return config;
}

ScopedCluster::ScopedCluster(Config config) {
  Init(config);
  auto nodes = runtime::QueryNodes(internal::ClusterAddress());
  if (nodes.ok() && !nodes->empty()) session_dir_ = nodes->front().session_dir;
}

ScopedCluster::~ScopedCluster() { Shutdown(); }

struct ClusterHandle {
  runtime::ClusterProcesses processes;
};

MultiNodeCluster::MultiNodeCluster(std::vector<NodeSpec> nodes,
                                   std::map<std::string, std::string> env) {
  env.try_emplace("LUMEN_HEALTH_CHECK_PERIOD_MS", "100");
  for (const auto& [name, value] : env) {
    const char* old = std::getenv(name.c_str());
    saved_env_.emplace_back(name, old ? old : "");
    ::setenv(name.c_str(), value.c_str(), 1);
  }
  for (const auto& spec : nodes) AddNode(spec);
  Config config;
  config.address = head_address_;
  Init(config);
}

size_t MultiNodeCluster::AddNode(const NodeSpec& spec) {
  runtime::ClusterSpec cluster;
  cluster.embedded = true;  // dies with this process, whatever happens
  cluster.start_head = head_address_.empty();
  cluster.head_address = spec.head_address.empty() ? head_address_ : spec.head_address;
  cluster.resources = spec.resources;
  if (!cluster.resources.contains("memory")) cluster.resources["memory"] = 1024.0 * 1024 * 1024;
  cluster.object_store_bytes = spec.store_bytes;
  if (cluster.start_head) cluster.metrics_port = 0;  // any free port (head_metrics_port)
  for (const auto& [name, value] : spec.env) ::setenv(name.c_str(), value.c_str(), 1);
  auto started = runtime::StartCluster(cluster);
  for (const auto& [name, value] : spec.env) ::unsetenv(name.c_str());
  if (!started.ok()) throw Error(std::string(started.status().message()));
  auto handle = std::make_unique<ClusterHandle>();
  handle->processes = std::move(*started);
  if (cluster.start_head) head_address_ = handle->processes.head_address;
  std::string address = handle->processes.node_socket;
  std::string id;
  WaitUntil([&] {
    auto listed = runtime::QueryNodes(head_address_);
    if (!listed.ok()) return false;
    for (const auto& n : *listed) {
      if (n.address == address && n.alive) id = n.id.Hex();
    }
    return !id.empty();
  });
  if (id.empty()) throw Error("a node did not join the head in time");
  node_ids_.push_back(id);
  clusters_.push_back(std::move(handle));
  return node_ids_.size() - 1;
}

MultiNodeCluster::~MultiNodeCluster() {
  Shutdown();
  // Nodes first, the head (in the first cluster) last.
  for (auto it = clusters_.rbegin(); it != clusters_.rend(); ++it) {
    runtime::StopCluster((*it)->processes);
  }
  for (const auto& [name, value] : saved_env_) {
    if (value.empty()) {
      ::unsetenv(name.c_str());
    } else {
      ::setenv(name.c_str(), value.c_str(), 1);
    }
  }
}

size_t MultiNodeCluster::index_of(const std::string& node_id) const {
  for (size_t i = 0; i < node_ids_.size(); ++i)
    if (node_ids_[i] == node_id) return i;
  return node_ids_.size();
}

pid_t MultiNodeCluster::head_pid() const {
  return clusters_.at(head_index_)->processes.pids.front();
}

pid_t MultiNodeCluster::daemon_pid(size_t i) const {
  return clusters_.at(i)->processes.pids.back();
}

int MultiNodeCluster::head_metrics_port() const {
  std::ifstream file(clusters_.front()->processes.session_dir + "/metrics_address");
  std::string address;
  std::getline(file, address);
  auto colon = address.rfind(':');
  return colon == std::string::npos ? -1 : std::atoi(address.c_str() + colon + 1);
}

std::string MultiNodeCluster::node_address(size_t i) const {
  return clusters_.at(i)->processes.node_socket;
}

void MultiNodeCluster::KillNode(size_t i) { ::kill(daemon_pid(i), SIGKILL); }

void MultiNodeCluster::RestartHead(bool from_state) {
  KillHead();
  StartHeadAgain(from_state);
}

void MultiNodeCluster::KillHead() {
  pid_t head = head_pid();
  ::kill(head, SIGKILL);
  WaitForChildExit(head, 10000);
}

void MultiNodeCluster::StartHeadAgain(bool from_state) {
  runtime::ClusterSpec spec;
  spec.embedded = true;
  spec.start_node = false;
  if (from_state) spec.head_state_dir = clusters_.front()->processes.session_dir + "/head_state";
  spec.head_port = std::stoi(head_address_.substr(head_address_.rfind(':') + 1));
  auto started = runtime::StartCluster(spec);
  if (!started.ok()) throw Error(std::string(started.status().message()));
  if (started->head_address != head_address_) throw Error("the new head got another address");
  auto handle = std::make_unique<ClusterHandle>();
  handle->processes = std::move(*started);
  clusters_.push_back(std::move(handle));
  head_index_ = clusters_.size() - 1;
}

std::string ScopedCluster::session_dir() const { return session_dir_; }

bool WaitUntil(const std::function<bool()>& condition, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!condition()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    // Polling an external condition (a process table, a file): there is no
    // event to wait on.
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return true;
}

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

size_t FilesIn(const std::string& dir) {
  size_t n = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) n += e.is_regular_file() ? 1 : 0;
  return n;
}

uint8_t PatternByte(uint64_t seed, uint64_t i) {
  return static_cast<uint8_t>((seed * 131 + i * 7 + (i >> 10)) & 0xff);
}

std::vector<uint8_t> Pattern(uint64_t seed, uint64_t size) {
  std::vector<uint8_t> v(size);
  for (uint64_t i = 0; i < size; ++i) v[i] = PatternByte(seed, i);
  return v;
}

size_t RegularFilesUnder(const std::string& dir) {
  size_t n = 0;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(dir, ec);
       !ec && it != std::filesystem::end(it); it.increment(ec)) {
    n += it->is_regular_file(ec);
  }
  return n;
}

Scratch::Scratch(const std::string& what)
    : dir((std::filesystem::temp_directory_path() /
           ("lumen-" + what + "-" + std::to_string(::getpid())))
              .string()),
      gate(dir + "-gate") {}

Scratch::~Scratch() {
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  std::filesystem::remove(gate, ec);
}

std::vector<pid_t> ChildPids(pid_t parent, bool include_zombies) {
  std::vector<pid_t> out;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    std::string name = entry.path().filename();
    if (name.empty() || !std::isdigit(static_cast<unsigned char>(name[0]))) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string line;
    if (!std::getline(stat, line)) continue;
    auto close = line.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 2));
    char state;
    pid_t ppid;
    rest >> state >> ppid;
    if (ppid == parent && (include_zombies || state != 'Z')) out.push_back(std::stoi(name));
  }
  return out;
}

std::vector<pid_t> ProcessesMentioning(const std::string& needle) {
  std::vector<pid_t> out;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    std::string name = entry.path().filename();
    if (name.empty() || !std::isdigit(static_cast<unsigned char>(name[0]))) continue;
    for (const char* file : {"environ", "cmdline"}) {
      std::ifstream in(entry.path() / file, std::ios::binary);
      std::string content((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      if (content.find(needle) != std::string::npos) {
        std::ifstream stat(entry.path() / "stat");
        std::string line;
        std::getline(stat, line);
        auto close = line.rfind(')');
        if (close != std::string::npos && close + 2 < line.size() && line[close + 2] == 'Z') break;
        out.push_back(std::stoi(name));
        break;
      }
    }
  }
  return out;
}

std::set<std::string> SessionDirs() {
  std::set<std::string> out;
  const char* tmp = std::getenv("TMPDIR");
  std::string root = tmp && *tmp ? tmp : "/tmp";
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(root, ec)) {
    if (entry.path().filename().string().rfind("lumen-session-", 0) == 0) out.insert(entry.path());
  }
  return out;
}

std::set<std::string> LumenShmEntries() {
  std::set<std::string> out;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm", ec)) {
    if (entry.path().filename().string().find("lumen") != std::string::npos) out.insert(entry.path());
  }
  return out;
}

uint64_t ProcStatusBytes(pid_t pid, const std::string& field) {
  std::ifstream in(pid == 0 ? std::string("/proc/self/status")
                            : "/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field, 0) == 0) return std::stoull(line.substr(field.size())) * 1024;
  }
  return 0;
}

int RunCommand(const std::string& command, std::string* output) {
  output->clear();
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return -1;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), pipe)) > 0) output->append(buf, n);
  int status = ::pclose(pipe);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace lumen::test
