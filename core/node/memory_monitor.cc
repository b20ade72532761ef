#include "core/node/memory_monitor.h"

#include <algorithm>
#include <fstream>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "lumen/common/logging.h"

namespace lumen::node {

namespace {

std::string MiB(uint64_t bytes) { return absl::StrCat(bytes >> 20, " MiB"); }

}  // namespace

MemoryMonitor::MemoryMonitor(boost::asio::io_context& io, MemoryMonitorOptions options,
                             Hooks hooks)
    : options_(options), hooks_(std::move(hooks)), check_timer_(io), resume_timer_(io) {}

MemoryMonitor::~MemoryMonitor() { Stop(); }

void MemoryMonitor::Start() {
  io_thread_.Check("MemoryMonitor");
  if (options_.budget_bytes == 0) return;
  stopped_ = false;
  LUMEN_LOG(INFO) << "memory monitor: workers' budget " << MiB(options_.budget_bytes)
                  << ", checked every " << options_.refresh_period.count() << " ms";
  CheckLater();
}

void MemoryMonitor::Stop() {
  stopped_ = true;
  check_timer_.cancel();
  resume_timer_.cancel();
}

std::optional<size_t> MemoryMonitor::ChooseVictim(const std::vector<WorkerMemory>& workers) {
  std::optional<size_t> best;
  for (size_t i = 0; i < workers.size(); ++i) {
    const WorkerMemory& w = workers[i];
    if (!w.leased) continue;
    if (!best) {
      best = i;
      continue;
    }
    const WorkerMemory& b = workers[*best];
    // Retriable before non-retriable; then the newest lease.
    if (w.retriable != b.retriable ? w.retriable : w.lease_id > b.lease_id) best = i;
  }
  return best;
}

std::string MemoryMonitor::KillReason(const WorkerMemory& victim, uint64_t used, uint64_t budget) {
  return absl::StrCat(kMemoryMonitorKillTag, "the node's workers used ", MiB(used),
                      ", over its memory budget of ", MiB(budget), "; this worker (pid ",
                      victim.pid, ", ", MiB(victim.rss_bytes), ") ran the newest ",
                      victim.retriable ? "retriable" : "non-retriable", " lease");
}

uint64_t MemoryMonitor::ReadAnonRss(pid_t pid) {
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("RssAnon:", 0) != 0) continue;
    // "RssAnon:	  123456 kB"
    std::string digits;
    for (char c : line) {
      if (c >= '0' && c <= '9') digits.push_back(c);
    }
    uint64_t kb = 0;
    return absl::SimpleAtoi(digits, &kb) ? kb * 1024 : 0;
  }
  return 0;
}

std::chrono::milliseconds MemoryMonitor::next_backoff() const {
  std::chrono::milliseconds pause = options_.backoff;
  const bool in_a_row = kills_in_a_row_ > 0 &&
                        std::chrono::steady_clock::now() - last_kill_ < options_.max_backoff;
  for (int i = 0; in_a_row && i < kills_in_a_row_ && pause < options_.max_backoff; ++i) pause *= 2;
  return std::min(pause, options_.max_backoff);
}

std::optional<WorkerMemory> MemoryMonitor::Check() {
  io_thread_.Check("MemoryMonitor");
  if (options_.budget_bytes == 0) return std::nullopt;
  std::vector<WorkerMemory> workers = hooks_.sample();
  // The killed ones still listed are on their way out: their memory is about
  // to be freed, and killing them again would take nobody's memory.
  absl::flat_hash_set<pid_t> still_killed;
  uint64_t used = 0;
  std::vector<WorkerMemory> live;
  live.reserve(workers.size());
  for (WorkerMemory& w : workers) {
    if (killed_.contains(w.pid)) {
      still_killed.insert(w.pid);
      continue;
    }
    used += w.rss_bytes;
    live.push_back(std::move(w));
  }
  killed_ = std::move(still_killed);
  if (used <= options_.budget_bytes) return std::nullopt;
  std::optional<size_t> victim = ChooseVictim(live);
  if (!victim) return std::nullopt;  // only idle workers: nothing a kill would retry
  WorkerMemory chosen = live[*victim];
  std::string reason = KillReason(chosen, used, options_.budget_bytes);
  LUMEN_LOG(WARNING) << reason;
  const std::chrono::milliseconds pause = next_backoff();
  const bool in_a_row =
      kills_in_a_row_ > 0 && std::chrono::steady_clock::now() - last_kill_ < options_.max_backoff;
  kills_in_a_row_ = in_a_row ? kills_in_a_row_ + 1 : 1;
  last_kill_ = std::chrono::steady_clock::now();
  ++kills_;
  killed_.insert(chosen.pid);
  hooks_.kill(chosen, reason);
  paused_ = true;
  hooks_.pause_grants(true);
  resume_timer_.expires_after(pause);
  resume_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (!ec) Resume();
  });
  return chosen;
}

void MemoryMonitor::Resume() {
  if (!paused_) return;
  paused_ = false;
  hooks_.pause_grants(false);
}

void MemoryMonitor::CheckLater() {
  check_timer_.expires_after(options_.refresh_period);
  check_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec || stopped_) return;
    Check();
    CheckLater();
  });
}

}  // namespace lumen::node
