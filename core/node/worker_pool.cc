#include "core/node/worker_pool.h"

#include <sys/wait.h>

#include <algorithm>

#include "lumen/common/logging.h"

namespace lumen::node {

WorkerPool::WorkerPool(WorkerPoolOptions options) : options_(std::move(options)) {
  options_.pool_size = std::clamp(options_.pool_size, 0, kMaxPoolSize);
}

Job* WorkerPool::FindJob(const JobId& job) {
  io_thread_.Check("WorkerPool");
  auto it = jobs_.find(job);
  return it == jobs_.end() ? nullptr : &it->second;
}

Job& WorkerPool::GetOrAddJob(const JobId& job, bool* inserted) {
  io_thread_.Check("WorkerPool");
  auto [it, added] = jobs_.try_emplace(job);
  if (inserted != nullptr) *inserted = added;
  return it->second;
}

bool WorkerPool::StartWorker(const JobId& job_id, std::string* why) {
  io_thread_.Check("WorkerPool");
  auto jit = jobs_.find(job_id);
  if (jit == jobs_.end() || jit->second.exe_path.empty()) return true;
  WorkerId id = WorkerId::Random();
  auto pid = options_.launcher->Launch(WorkerLaunch{id, job_id, jit->second.exe_path});
  if (absl::IsAborted(pid.status())) {
    // The fork server may have started it after all: once more under a new
    // id (a late twin with the old one is refused at its hello).
    LUMEN_LOG(WARNING) << "worker start under a new id: " << pid.status();
    id = WorkerId::Random();
    pid = options_.launcher->Launch(WorkerLaunch{id, job_id, jit->second.exe_path});
  }
  if (!pid.ok()) {
    LUMEN_LOG(ERROR) << "cannot start a worker: " << pid.status();
    if (++jit->second.failed_starts >= kMaxFailedStarts) {
      *why = std::string(pid.status().message());
      return false;
    }
    return true;
  }
  ++num_launched_;
  Worker& w = workers_[id];
  w.id = id;
  w.pid = *pid;
  w.job = job_id;
  worker_pids_[*pid] = id;
  ++jit->second.starting;
  return true;
}

absl::Status WorkerPool::OnWorkerHello(const WorkerId& id, uint64_t conn_id,
                                       const std::string& address) {
  io_thread_.Check("WorkerPool");
  auto it = workers_.find(id);
  if (it == workers_.end() || it->second.state != WorkerState::kStarting) {
    return absl::PermissionDeniedError("unknown worker");
  }
  Worker& w = it->second;
  w.conn_id = conn_id;
  w.address = address;
  w.state = WorkerState::kIdle;
  w.idle_since = options_.now();
  Job& job = jobs_[w.job];
  --job.starting;
  job.idle.push_back(w.id);
  return absl::OkStatus();
}

Worker* WorkerPool::Find(const WorkerId& id) {
  io_thread_.Check("WorkerPool");
  auto it = workers_.find(id);
  return it == workers_.end() ? nullptr : &it->second;
}

bool WorkerPool::HasIdle(const JobId& job_id) {
  io_thread_.Check("WorkerPool");
  auto jit = jobs_.find(job_id);
  if (jit == jobs_.end()) return false;
  auto& idle = jit->second.idle;
  // Drop idle workers that died since they were pooled.
  while (!idle.empty() && !workers_.contains(idle.front())) idle.pop_front();
  return !idle.empty();
}

Worker* WorkerPool::TakeIdle(const JobId& job_id, uint64_t lease_id) {
  io_thread_.Check("WorkerPool");
  auto jit = jobs_.find(job_id);
  if (jit == jobs_.end()) return nullptr;
  Job& job = jit->second;
  if (!HasIdle(job_id)) return nullptr;
  Worker& w = workers_[job.idle.front()];
  job.idle.pop_front();
  job.failed_starts = 0;
  w.state = WorkerState::kLeased;
  w.lease_id = lease_id;
  return &w;
}

int WorkerPool::Refill(const JobId& job_id, std::string* why) {
  io_thread_.Check("WorkerPool");
  Job* job = FindJob(job_id);
  if (job == nullptr || job->remote || job->exe_path.empty()) return 0;
  HasIdle(job_id);  // forgets idle entries whose process is gone
  int started = 0;
  while (static_cast<int>(job->idle.size()) + job->starting < options_.pool_size) {
    const int starting = job->starting;
    if (!StartWorker(job_id, why)) return started;
    if (job->starting == starting) break;  // this launch failed; retried on the next take
    ++started;
  }
  return started;
}

void WorkerPool::ReturnToIdle(const WorkerId& id) {
  io_thread_.Check("WorkerPool");
  auto wit = workers_.find(id);
  if (wit == workers_.end() || wit->second.state != WorkerState::kLeased) return;
  wit->second.state = WorkerState::kIdle;
  wit->second.idle_since = options_.now();
  wit->second.lease_id = 0;
  jobs_[wit->second.job].idle.push_back(id);
}

void WorkerPool::RemoveFromIdle(const Worker& w) {
  auto jit = jobs_.find(w.job);
  if (jit == jobs_.end()) return;
  auto& idle = jit->second.idle;
  idle.erase(std::remove(idle.begin(), idle.end(), w.id), idle.end());
}

void WorkerPool::DropFromIdle(const WorkerId& id) {
  io_thread_.Check("WorkerPool");
  auto wit = workers_.find(id);
  if (wit != workers_.end()) RemoveFromIdle(wit->second);
}

void WorkerPool::Kill(const WorkerId& id, const char* reason) {
  io_thread_.Check("WorkerPool");
  auto wit = workers_.find(id);
  if (wit == workers_.end()) return;
  Worker& w = wit->second;
  RemoveFromIdle(w);
  // Only a kill that ends the process is its cause (not one that reaches a
  // process already dying, e.g. of someone else's SIGKILL).
  if (w.kill_reason.empty() && !options_.launcher->IsExiting(w.pid)) w.kill_reason = reason;
  options_.launcher->Kill(w.pid);
}

void WorkerPool::KillJobWorkers(const JobId& job, const std::function<bool(const Worker&)>& keep) {
  io_thread_.Check("WorkerPool");
  std::vector<WorkerId> doomed;
  for (const auto& [wid, w] : workers_) {
    if (w.job == job && !keep(w)) doomed.push_back(wid);
  }
  for (const WorkerId& wid : doomed) Kill(wid, "its job ended");
}

std::optional<WorkerPool::Gone> WorkerPool::OnProcessExit(const ProcessExit& exit) {
  io_thread_.Check("WorkerPool");
  auto pit = worker_pids_.find(exit.pid);
  if (pit == worker_pids_.end()) return std::nullopt;
  WorkerId wid = pit->second;
  worker_pids_.erase(pit);
  auto wit = workers_.find(wid);
  if (wit == workers_.end()) return std::nullopt;
  Gone gone;
  gone.worker = std::move(wit->second);
  workers_.erase(wit);
  const Worker& w = gone.worker;
  gone.exit.job = w.job;
  gone.exit.pid = exit.pid;
  gone.exit.cause = DescribeExit(exit.wait_status, w.kill_reason);
  gone.exit.signal = WIFSIGNALED(exit.wait_status) ? WTERMSIG(exit.wait_status) : 0;
  gone.exit.exit_code = WIFEXITED(exit.wait_status) ? WEXITSTATUS(exit.wait_status) : -1;
  LUMEN_LOG(DEBUG) << "worker " << w.pid << " " << gone.exit.cause;
  if (w.state == WorkerState::kStarting) {
    if (Job* job = FindJob(w.job)) {
      --job->starting;
      gone.job_start_failed = ++job->failed_starts >= kMaxFailedStarts;
    }
  }
  RemoveFromIdle(w);
  return gone;
}

void WorkerPool::ReapIdle() {
  io_thread_.Check("WorkerPool");
  // Workers started beyond the pool (for nested or blocked tasks) exit once
  // they have been idle a while; the longest idle go first.
  auto now = options_.now();
  for (auto& [job_id, job] : jobs_) {
    while (static_cast<int>(job.idle.size()) > options_.pool_size) {
      auto wit = workers_.find(job.idle.front());
      if (wit == workers_.end()) {
        job.idle.pop_front();
        continue;
      }
      if (now - wit->second.idle_since < options_.idle_timeout) break;
      job.idle.pop_front();
      Kill(wit->first, "it was idle");  // reaped through OnProcessExit
    }
  }
}

size_t WorkerPool::num_idle() const {
  size_t idle = 0;
  for (const auto& [id, job] : jobs_) idle += job.idle.size();
  return idle;
}

}  // namespace lumen::node
