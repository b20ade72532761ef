#include "test/chaos/chaos_support.h"

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "lumen/common/head_client.h"
#include "lumen/errors.h"
#include "lumen/internal/runtime.h"
#include "test/core/test_support.h"

namespace lumen::test::chaos {
namespace {

bool NamesStore(const std::string& target) {
  return target.find("memfd:lumen") != std::string::npos ||
         (target.rfind("/dev/shm/", 0) == 0 && target.find("lumen") != std::string::npos);
}

std::string FieldOf(const runtime::StateRow& row, const std::string& name) {
  for (const auto& [key, value] : row) {
    if (key == name) return value;
  }
  return "";
}

}  // namespace

Seed::Seed() {
  const char* env = std::getenv("LUMEN_TEST_SEED");
  if (env != nullptr && *env != '\0') {
    value_ = std::strtoull(env, nullptr, 10);
  } else {
    value_ = (static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
  }
}

size_t StoreFdsOfThisProcess() {
  size_t n = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
    std::error_code link_ec;
    auto target = std::filesystem::read_symlink(entry.path(), link_ec);
    if (!link_ec && NamesStore(target.string())) ++n;
  }
  return n;
}

size_t StoreMappingsOfThisProcess() {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  size_t n = 0;
  while (std::getline(maps, line)) {
    auto slash = line.find('/');
    if (slash != std::string::npos && NamesStore(line.substr(slash))) ++n;
  }
  return n;
}

std::set<pid_t> ChildrenWithZombies() {
  std::vector<pid_t> children = lumen::test::ChildPids(::getpid(), /*include_zombies=*/true);
  return {children.begin(), children.end()};
}

LeakCheck::LeakCheck()
    : shm_entries_(LumenShmEntries()),
      store_fds_(StoreFdsOfThisProcess()),
      store_mappings_(StoreMappingsOfThisProcess()),
      children_(ChildrenWithZombies()) {}

std::string LeakCheck::Leaks(const std::string& session_dir,
                             std::chrono::milliseconds timeout) const {
  std::string report;
  auto check = [&] {
    report.clear();
    for (const auto& entry : LumenShmEntries()) {
      if (!shm_entries_.contains(entry)) absl::StrAppend(&report, "new /dev/shm entry ", entry, "\n");
    }
    size_t fds = StoreFdsOfThisProcess();
    if (fds > store_fds_) {
      absl::StrAppend(&report, fds - store_fds_, " more store fds open in this process\n");
    }
    size_t mappings = StoreMappingsOfThisProcess();
    if (mappings > store_mappings_) {
      absl::StrAppend(&report, mappings - store_mappings_, " more store mappings in this process\n");
    }
    for (pid_t child : ChildrenWithZombies()) {
      if (!children_.contains(child)) absl::StrAppend(&report, "child process ", child, " left\n");
    }
    if (!session_dir.empty()) {
      for (pid_t pid : ProcessesMentioning(session_dir)) {
        if (pid != ::getpid()) {
          absl::StrAppend(&report, "process ", pid, " of session ", session_dir, " still alive\n");
        }
      }
    }
    return report.empty();
  };
  WaitUntil(check, timeout);
  return report;
}

ClusterUsage ReadClusterUsage() {
  auto nodes = runtime::QueryNodes(internal::ClusterAddress());
  if (!nodes.ok()) throw Error(absl::StrCat("ReadClusterUsage: ", nodes.status().message()));
  ClusterUsage usage;
  for (const auto& listed : *nodes) {
    if (!listed.alive) continue;
    auto node = runtime::QueryNodeStats(listed.address);
    if (!node.ok()) throw Error(absl::StrCat("ReadClusterUsage: ", node.status().message()));
    auto total = node->total.find("CPU");
    auto free = node->available.find("CPU");
    usage.total_cpus += total == node->total.end() ? 0 : total->second;
    usage.free_cpus += free == node->available.end() ? 0 : free->second;
    usage.store_used += node->store_used;
    usage.workers += node->workers;
    usage.idle_workers += node->idle_workers;
    usage.active_leases += node->active_leases;
  }
  return usage;
}

std::vector<pid_t> BusyWorkerPids() {
  std::vector<pid_t> out;
  auto nodes = runtime::QueryNodes(internal::ClusterAddress());
  if (!nodes.ok()) return out;
  std::set<pid_t> seen;
  for (const auto& node : *nodes) {
    if (!node.alive) continue;
    auto rows = runtime::QueryNodeState(node.address, "tasks");
    if (!rows.ok()) continue;
    for (const auto& row : *rows) {
      if (FieldOf(row, "STATE") != "RUNNING") continue;
      std::string pid = FieldOf(row, "WORKER_PID");
      if (pid.empty()) continue;
      pid_t p = static_cast<pid_t>(std::stol(pid));
      if (seen.insert(p).second) out.push_back(p);
    }
  }
  return out;
}

bool ProcessGone(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return true;
  auto close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() &&
         (line[close + 2] == 'Z' || line[close + 2] == 'X');
}

void AppendLine(const std::string& path, const std::string& line) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd < 0) return;
  std::string text = line + "\n";
  ssize_t ignored = ::write(fd, text.data(), text.size());
  (void)ignored;
  ::close(fd);
}

std::vector<std::string> ReadLines(const std::string& path) {
  std::vector<std::string> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) out.push_back(line);
  return out;
}

ScratchDir::ScratchDir(const std::string& prefix) {
  const char* tmp = std::getenv("TMPDIR");
  std::string root = tmp != nullptr && *tmp != '\0' ? tmp : "/tmp";
  std::string pattern = root + "/" + prefix + "-XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr) throw Error("ScratchDir: mkdtemp failed");
  path_ = pattern;
}

ScratchDir::~ScratchDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

}  // namespace lumen::test::chaos
