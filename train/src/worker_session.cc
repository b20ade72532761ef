#include "worker_session.h"

#include <unistd.h>

#include <filesystem>
#include <system_error>

#include "report_channel.h"

namespace lumen::train {
namespace fs = std::filesystem;

WorkerSession::WorkerSession(WorkerSetup setup)
    : setup_(std::move(setup)), latest_(setup_.checkpoint), next_index_(setup_.next_report_index) {}

void WorkerSession::JoinGroup() {
  collective::InitGroup({.world_size = setup_.world_size,
                         .rank = setup_.world_rank,
                         .backend = setup_.use_gpu ? collective::Backend::kNccl
                                                   : collective::Backend::kGloo,
                         .name = setup_.group_name,
                         .timeout = std::chrono::milliseconds(setup_.collective_timeout_ms)});
  timers_->Take();  // the first interval starts when the group is up
}

void WorkerSession::LeaveGroup() { collective::DestroyGroup(setup_.group_name); }

std::string WorkerSession::NewCheckpointDir() {
  loop_thread_.Check("TrainContext::NewCheckpointDir");
  // On the run's storage, so that Persist is a rename within one file system.
  fs::path dir = fs::path(setup_.run_dir) /
                 (".tmp_checkpoint_" + setup_.run_id + "_r" + std::to_string(setup_.world_rank) +
                  "_" + std::to_string(::getpid()) + "_" + std::to_string(temp_counter_++));
  fs::remove_all(dir);
  fs::create_directories(dir);
  if (!checkpoint_started_) checkpoint_started_ = StepTimers::Clock::now();
  return dir.string();
}

Checkpoint WorkerSession::Persist(const std::string& dir, const Metrics& metrics) {
  Checkpoint c{.path = (fs::path(setup_.run_dir) / internal::CheckpointDirName(next_index_)).string(),
               .index = next_index_,
               .metrics = metrics};
  std::error_code ec;
  fs::remove_all(c.path, ec);  // a leftover of an attempt that died after this index
  fs::rename(dir, c.path);     // atomic: a checkpoint_NNNNNN directory is always complete
  return c;
}

void WorkerSession::Report(const Metrics& metrics, const std::string& checkpoint_dir) {
  loop_thread_.Check("TrainContext::Report");
  std::optional<Checkpoint> persisted;
  if (!checkpoint_dir.empty()) {
    if (setup_.world_rank == 0) {
      persisted = Persist(checkpoint_dir, metrics);
    } else {
      std::error_code ec;
      fs::remove_all(checkpoint_dir, ec);  // only rank 0's is kept
    }
  }
  if (checkpoint_started_) {
    timers_->AddCheckpoint(StepTimers::Clock::now() - *checkpoint_started_);
    checkpoint_started_.reset();
  }
  const auto bookkeeping_start = StepTimers::Clock::now();
  StepTimers::Interval t = timers_->Take();
  const int64_t index = next_index_++;
  if (setup_.world_rank == 0) {
    // Before the barrier: once any rank has left Report k (and may die), the
    // driver can already read report k.
    internal::ReportRecord record{.index = index, .metrics = metrics, .checkpoint = persisted};
    record.metrics[kSamplesPerSecond] =
        t.wall_s > 0 ? static_cast<double>(t.samples) * setup_.world_size / t.wall_s : 0;
    record.metrics[kTimeTotalS] = t.wall_s;
    record.metrics[kTimeComputeS] = t.compute_s();
    record.metrics[kTimeAllReduceS] = t.allreduce_s;
    record.metrics[kTimeDataWaitS] = t.data_wait_s;
    record.metrics[kTimeCheckpointS] = t.checkpoint_s;
    record.metrics[kTimeFrameworkS] = t.framework_s;
    record.metrics[kSteps] = static_cast<double>(t.steps);
    record.metrics[kWorldSize] = setup_.world_size;
    if (record.checkpoint) record.checkpoint->metrics = record.metrics;
    kv::Put(internal::ReportKey(setup_.run_id, index), codec::EncodeValue(record),
            internal::kReportNamespace);
  }
  // Every rank reaches report k before any leaves it. The wait counts as
  // synchronisation (all-reduce) time of the next interval.
  auto barrier_start = StepTimers::Clock::now();
  timers_->AddFramework(barrier_start - bookkeeping_start);
  collective::Barrier(setup_.group_name);
  timers_->AddAllReduce(StepTimers::Clock::now() - barrier_start);
  // Past the barrier rank 0's rename is done: every rank that reported a
  // checkpoint sees it as the latest (same path and index on every rank).
  if (persisted) {
    latest_ = persisted;
  } else if (!checkpoint_dir.empty()) {
    latest_ = Checkpoint{
        .path = (fs::path(setup_.run_dir) / internal::CheckpointDirName(index)).string(),
        .index = index,
        .metrics = metrics};
  }
}

}  // namespace lumen::train
