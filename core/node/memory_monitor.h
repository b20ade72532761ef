// MemoryMonitor: keeps this node's workers within a memory budget (Ray's
// memory monitor and OOM killer). Every refresh period it samples the
// resident anonymous memory (RssAnon, /proc/PID/status) of each worker the
// daemon started; when their sum is over the budget it kills one worker that
// runs leased work — the newest retriable one first (its task is retried by
// its owner), else the newest non-retriable one (its task fails with
// lumen::OutOfMemoryError) — and pauses new lease grants on the node for a
// backoff that doubles with each kill in a row (so the retried task is not
// granted straight back into the same pressure). Daemons are never victims:
// only workers are sampled and killed (and their oom_score_adj, 500, is above
// the daemons' 0 for the kernel's own OOM killer).
//
//   MemoryMonitor monitor(io, {.budget_bytes = 2ull << 30},
//                         {.sample = [&] { return SampleWorkers(); },
//                          .kill = [&](const WorkerMemory& w, const std::string& why) {...},
//                          .pause_grants = [&](bool paused) {...}});
//   monitor.Start();  // a no-op with no budget
//
// Victim choice (ChooseVictim) is pure; Check runs one round and is what the
// timer calls, so tests drive it without a timer. Only on the node daemon's
// io thread (checked in debug builds); hooks run on it too.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio.hpp>

#include "absl/container/flat_hash_set.h"
#include "lumen/common/failure_types.h"
#include "lumen/common/ids.h"
#include "lumen/common/thread_checker.h"

namespace lumen::node {

struct MemoryMonitorOptions {
  uint64_t budget_bytes = 0;  // the workers' total RssAnon allowed; 0: monitor off
  std::chrono::milliseconds refresh_period{250};
  // Lease grants pause this long after a kill, doubled for each further kill
  // in a row (kills less than max_backoff apart), up to max_backoff.
  std::chrono::milliseconds backoff{1000};
  std::chrono::milliseconds max_backoff{30000};
};

// One worker process as sampled.
struct WorkerMemory {
  WorkerId worker;
  pid_t pid = 0;
  uint64_t rss_bytes = 0;  // resident anonymous memory
  bool leased = false;     // runs leased work (only those are victims)
  uint64_t lease_id = 0;   // grant order: a larger id is newer
  bool retriable = false;  // its lease's work may be retried (max_retries != 0)
};

class MemoryMonitor {
 public:
  struct Hooks {
    // Every worker process of the node with its memory (ReadAnonRss).
    std::function<std::vector<WorkerMemory>()> sample;
    // Kill `victim` (SIGKILL), its exit naming `reason`.
    std::function<void(const WorkerMemory& victim, const std::string& reason)> kill;
    // Stop (true) or resume (false) granting leases on the node.
    std::function<void(bool paused)> pause_grants;
  };

  MemoryMonitor(boost::asio::io_context& io, MemoryMonitorOptions options, Hooks hooks);
  ~MemoryMonitor();

  // Checks every refresh period until Stop; nothing when budget_bytes is 0.
  void Start();
  void Stop();

  // One round: samples, and kills one victim when over budget (not one
  // already killed and not yet gone). Returns the victim, if any.
  std::optional<WorkerMemory> Check();

  // The index in `workers` of the one to kill: the leased retriable worker
  // with the newest lease, else the leased one with the newest lease;
  // nullopt when none is leased. O(workers).
  static std::optional<size_t> ChooseVictim(const std::vector<WorkerMemory>& workers);
  // The text a victim's exit carries: the budget, the usage, the victim.
  static std::string KillReason(const WorkerMemory& victim, uint64_t used, uint64_t budget);
  // RssAnon of `pid` in bytes (/proc/PID/status); 0 when it is gone.
  static uint64_t ReadAnonRss(pid_t pid);

  uint64_t kills() const { return kills_; }
  bool grants_paused() const { return paused_; }
  // The pause after the next kill (backoff doubled per kill in a row).
  std::chrono::milliseconds next_backoff() const;

 private:
  void CheckLater();
  void Resume();

  ThreadChecker io_thread_;
  MemoryMonitorOptions options_;
  Hooks hooks_;
  boost::asio::steady_timer check_timer_;
  boost::asio::steady_timer resume_timer_;
  // Killed and still sampled (not reaped yet): neither counted nor chosen again.
  absl::flat_hash_set<pid_t> killed_;
  int kills_in_a_row_ = 0;
  std::chrono::steady_clock::time_point last_kill_;
  uint64_t kills_ = 0;
  bool paused_ = false;
  bool stopped_ = true;
};

}  // namespace lumen::node
