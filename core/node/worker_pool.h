// WorkerPool: the node's worker processes and the jobs they serve. It starts
// workers through a ProcessLauncher, keeps each job's idle workers for reuse,
// reaps surplus idle ones after the idle timeout, and turns process exits
// into "worker gone" records with their cause.
//
//   WorkerPool pool({.launcher = &launcher, .pool_size = 4, ...});
//   pool.RegisterDriver(job, conn_id, "/path/to/driver");
//   pool.StartWorker(job);                       // kStarting
//   pool.OnWorkerHello(worker_id, conn, addr);   // kIdle, in the job's idle list
//   Worker* w = pool.TakeIdle(job);              // the lease manager leases it
//   pool.Refill(job, &why);                      // an actor took it: prestart another
//
// Worker lifecycle: kStarting (spawned, not yet connected) -> kIdle (in its
// job's idle list) <-> kLeased (granted to a lease holder) -> gone (its process
// was reaped). Only on the node daemon's io thread (checked in debug builds).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <deque>
#include <functional>
#include <optional>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "lumen/common/ids.h"
#include "lumen/common/thread_checker.h"
#include "core/node/process_launcher.h"

namespace lumen::node {

enum class WorkerState { kStarting, kIdle, kLeased };

struct Worker {
  WorkerId id;
  pid_t pid = 0;
  JobId job;
  WorkerState state = WorkerState::kStarting;
  uint64_t conn_id = 0;  // its connection to the daemon, once it said hello
  std::string address;   // where it listens, once it said hello
  uint64_t lease_id = 0;
  std::chrono::steady_clock::time_point idle_since;
  // Set when the daemon sends it SIGKILL: an exit by SIGKILL then names why.
  std::string kill_reason;
};

// How a worker process ended.
struct WorkerExit {
  JobId job;
  pid_t pid = 0;
  std::string cause;
  int signal = 0;
  int exit_code = -1;
};

// A job with work on this node.
struct Job {
  std::string exe_path;
  uint64_t driver_conn = 0;  // its driver's connection here, or 0
  bool remote = false;       // its driver runs on another node: no prestarted pool
  std::deque<WorkerId> idle;
  int starting = 0;
  int failed_starts = 0;  // workers that exited before saying hello, in a row
};

struct WorkerPoolOptions {
  ProcessLauncher* launcher = nullptr;  // borrowed; outlives the pool
  // Prestarted workers each local job keeps ready (idle or starting): started
  // when its driver connects, topped up by Refill after an actor took one, and
  // kept past the idle timeout. Capped at WorkerPool::kMaxPoolSize.
  int pool_size = 0;
  std::chrono::milliseconds idle_timeout{10000};
  // The clock for idle times (a manual one in tests).
  std::function<std::chrono::steady_clock::time_point()> now = [] {
    return std::chrono::steady_clock::now();
  };
};

class WorkerPool {
 public:
  // Workers of a job that failed this many times in a row to start make the
  // job's lease requests fail (its binary probably does not call lumen::Init).
  static constexpr int kMaxFailedStarts = 5;
  // The largest pool_size honoured (LUMEN_PRESTART_WORKERS beyond it is capped).
  static constexpr int kMaxPoolSize = 64;

  explicit WorkerPool(WorkerPoolOptions options);

  // --- jobs ---
  Job* FindJob(const JobId& job);
  Job& GetOrAddJob(const JobId& job, bool* inserted = nullptr);
  void EraseJob(const JobId& job) { jobs_.erase(job); }
  const absl::flat_hash_map<JobId, Job>& jobs() const { return jobs_; }

  // --- workers ---
  // Starts a worker for `job` (which must have an exe path). Returns false and
  // sets `*why` when the launch failed for the kMaxFailedStarts-th time in a
  // row (the caller fails the job's waiting requests).
  [[nodiscard]] bool StartWorker(const JobId& job, std::string* why);
  // The worker connected and said hello: it becomes idle. Errors:
  // PermissionDenied when no such worker is starting.
  [[nodiscard]] absl::Status OnWorkerHello(const WorkerId& id, uint64_t conn_id,
                                           const std::string& address);
  Worker* Find(const WorkerId& id);
  // Whether `job` has an idle worker (forgetting idle entries whose process is gone).
  bool HasIdle(const JobId& job);
  // An idle worker of `job`, now kLeased under `lease_id`, or nullptr.
  Worker* TakeIdle(const JobId& job, uint64_t lease_id);
  // Tops the job's prestarted workers (idle + starting) up to pool_size, after
  // an actor's lease took one for good (an actor's worker is never reused).
  // Nothing for a job with a remote driver or no binary. Returns how many it
  // started; `*why` as for StartWorker when a launch failed for good.
  int Refill(const JobId& job, std::string* why);
  // Takes the worker out of its job's idle list (its connection closed).
  void DropFromIdle(const WorkerId& id);
  // A leased worker whose lease ended goes back to its job's idle list.
  void ReturnToIdle(const WorkerId& id);
  // Sends SIGKILL (once the process is not already exiting, `reason` becomes
  // its exit cause); it leaves the idle list now and is reaped later.
  void Kill(const WorkerId& id, const char* reason);
  // Kills the workers of `job` for which `keep` is false.
  void KillJobWorkers(const JobId& job, const std::function<bool(const Worker&)>& keep);

  // A worker process that ended and the record of how.
  struct Gone {
    Worker worker;
    WorkerExit exit;
    // It never said hello, for the kMaxFailedStarts-th time in a row in its job.
    bool job_start_failed = false;
  };
  // A child exited: returns the worker it was (no longer in the pool), or
  // nullopt for a process that is none of ours.
  std::optional<Gone> OnProcessExit(const ProcessExit& exit);

  // Kills the longest-idle workers of each job beyond the pool size that have
  // been idle longer than the idle timeout.
  void ReapIdle();

  int pool_size() const { return options_.pool_size; }
  size_t num_workers() const { return workers_.size(); }
  // Worker processes launched since the pool was created (tests and stats:
  // an actor that took a prestarted worker launched none).
  uint64_t num_launched() const { return num_launched_; }
  size_t num_idle() const;
  const absl::flat_hash_map<WorkerId, Worker>& workers() const { return workers_; }

 private:
  void RemoveFromIdle(const Worker& w);

  ThreadChecker io_thread_;
  WorkerPoolOptions options_;
  absl::flat_hash_map<WorkerId, Worker> workers_;
  absl::flat_hash_map<pid_t, WorkerId> worker_pids_;
  absl::flat_hash_map<JobId, Job> jobs_;
  uint64_t num_launched_ = 0;
};

}  // namespace lumen::node
