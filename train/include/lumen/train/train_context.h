// What a train loop sees of its worker group: ranks, configuration, its data
// shard, the group's collectives, reports and checkpoints (Ray Train's
// ray.train.get_context(), report(), get_checkpoint(), get_dataset_shard()).
//
//   void TrainLoop(lumen::train::TrainContext& ctx) { ... }
//   LUMEN_TRAIN_LOOP(TrainLoop);   // registered by name in every process (trainer.h)
//
// A TrainContext exists only inside a worker of DataParallelTrainer; it is a
// handle (copies share the worker's state). Used from the loop's thread
// (AllReduceAsync's futures may be waited on elsewhere).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "lumen/lumen.h"
#include "lumen/train/collective.h"
#include "lumen/train/dataset.h"
#include "lumen/train/result.h"
#include "lumen/train/step_timers.h"
#include "lumen/train/train_config.h"

namespace lumen::train {

// What the driver tells each worker (one per worker and attempt).
struct WorkerSetup {
  std::string run_id;           // unique per Fit (report keys)
  std::string experiment_name;
  std::string run_dir;          // storage_path/name
  std::string group_name;       // the collective group of this attempt
  int world_rank = 0, world_size = 1, local_rank = 0, local_world_size = 1, node_rank = 0;
  bool use_gpu = false;
  int64_t collective_timeout_ms = 30000;
  uint64_t bucket_bytes = 4ull << 20;
  TrainLoopConfig config;
  std::map<std::string, Dataset> datasets;
  std::optional<Checkpoint> checkpoint;  // the latest, to resume from
  int64_t next_report_index = 0;         // numbers reports (and checkpoints) across attempts
  bool drop_last = false;
  LUMEN_SERIALIZE(run_id, experiment_name, run_dir, group_name, world_rank, world_size, local_rank,
                  local_world_size, node_rank, use_gpu, collective_timeout_ms, bucket_bytes, config,
                  datasets, checkpoint, next_report_index, drop_last);
};

class WorkerSession;

class TrainContext {
 public:
  explicit TrainContext(std::shared_ptr<WorkerSession> session) : session_(std::move(session)) {}

  int GetWorldRank() const;
  int GetWorldSize() const;
  int GetLocalRank() const;       // among the workers on this node
  int GetLocalWorldSize() const;  // workers on this node
  int GetNodeRank() const;        // this node among the group's nodes
  const std::string& GetExperimentName() const;

  // A hyper-parameter of the trainer's config; std::out_of_range if absent.
  template <class T>
  T Config(const std::string& key) const {
    auto it = config().find(key);
    if (it == config().end()) throw std::out_of_range("TrainContext::Config: no key \"" + key + "\"");
    return static_cast<T>(it->second);
  }
  template <class T>
  T Config(const std::string& key, T fallback) const {
    auto it = config().find(key);
    return it == config().end() ? fallback : static_cast<T>(it->second);
  }

  // This worker's shard of dataset `name` (std::out_of_range if the trainer has none).
  DatasetShard GetDatasetShard(const std::string& name) const;

  // All-reduces over the worker group (Gloo on CPU; NCCL with use_gpu, whose
  // buffers are device memory). Timed as all-reduce time.
  template <collective::Element T>
  void AllReduce(std::span<T> data, collective::ReduceOp op = collective::ReduceOp::kAverage) {
    auto start = StepTimers::Clock::now();
    collective::AllReduce(data, op, GroupName());
    timers().AddAllReduce(StepTimers::Clock::now() - start);
  }
  template <collective::Element T>
  void AllReduce(std::vector<T>& data, collective::ReduceOp op = collective::ReduceOp::kAverage) {
    AllReduce(std::span<T>(data), op);
  }

  // Every worker calls it the same number of times: a barrier. Rank 0's
  // metrics (plus the trainer's timing metrics) become the run's; a
  // `checkpoint_dir` from NewCheckpointDir is persisted (rank 0's) as
  // storage_path/name/checkpoint_NNNNNN by an atomic rename; other ranks'
  // are discarded.
  void Report(const Metrics& metrics, const std::string& checkpoint_dir = "");
  // The latest checkpoint: the one this attempt resumed from, or the last
  // one reported since (on every rank that passed a directory to that Report;
  // its metrics are this rank's). Empty on a fresh start.
  std::optional<Checkpoint> GetCheckpoint() const;
  // A new empty directory (on the run's storage, under a temporary name) to
  // write a checkpoint into and pass to Report. The time from here to Report
  // counts as checkpoint time.
  std::string NewCheckpointDir();

  // The collective group of this worker group (for lumen::collective calls).
  const std::string& GroupName() const;
  bool UseGpu() const;
  uint64_t BucketBytes() const;
  StepTimers& timers() const;
  WorkerSession& session() const;

 private:
  const TrainLoopConfig& config() const;
  std::shared_ptr<WorkerSession> session_;
};

}  // namespace lumen::train
