// The configuration of a DataParallelTrainer run (Ray Train's ScalingConfig,
// RunConfig, FailureConfig, CheckpointConfig), plain values the driver fills in.
//
//   lumen::train::ScalingConfig{.num_workers = 2, .use_gpu = false};
//   lumen::train::RunConfig{.name = "linreg", .storage_path = "/shared/runs",
//                           .failure = {.max_failures = 2},
//                           .checkpoint = {.num_to_keep = 2}};
//
// Every wait and period of the trainer is a field here (milliseconds), so a
// test can shrink it; there are no hidden constants.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>

#include "lumen/scheduling.h"

namespace lumen::train {

// The hyper-parameters handed to every worker (TrainContext::Config<T>).
using TrainLoopConfig = std::map<std::string, double>;

// How many workers, and what each holds.
struct ScalingConfig {
  int num_workers = 1;
  // Each worker holds one GPU (CUDA_VISIBLE_DEVICES) and the group's
  // collectives use NCCL; otherwise Gloo on CPU buffers.
  bool use_gpu = false;
  // What each worker's bundle reserves; empty: {CPU: 1} (+ {GPU: 1} with use_gpu).
  std::map<std::string, double> resources_per_worker;
  PlacementStrategy placement_strategy = PlacementStrategy::PACK;
  // How long Fit waits for the worker group's placement group to be placed
  // before it fails with an error naming the demand (never hangs silently).
  std::chrono::milliseconds placement_timeout = std::chrono::seconds(60);
  // How long a collective call (and the group's rendezvous) may wait for the
  // other workers: a dead worker is detected by the others within this.
  std::chrono::milliseconds collective_timeout = std::chrono::seconds(30);
  // Gradient buckets of GradientBucketer, in bytes.
  uint64_t bucket_bytes = 4ull << 20;
  // Elastic scaling: with 0 < min_workers < num_workers a group runs with as
  // many workers as fit, from num_workers down to min_workers: after a node
  // loss the run goes on with fewer instead of waiting, and it grows back
  // (restarting from the latest checkpoint) when the cluster has room again.
  // 0: always exactly num_workers.
  int min_workers = 0;
  // Elastic: how long each size above min_workers may wait to be placed
  // (min_workers itself waits placement_timeout).
  std::chrono::milliseconds elastic_placement_timeout = std::chrono::seconds(2);
  // Elastic: how often a smaller group checks whether the cluster has room
  // for the missing workers (by the free resources summed over the nodes).
  std::chrono::milliseconds elastic_check_period = std::chrono::seconds(1);
  bool Elastic() const { return min_workers > 0 && min_workers < num_workers; }

  // The bundle of one worker, defaults applied.
  std::map<std::string, double> WorkerResources() const {
    std::map<std::string, double> r = resources_per_worker;
    if (!r.contains("CPU")) r["CPU"] = 1;
    if (use_gpu && !r.contains("GPU")) r["GPU"] = 1;
    return r;
  }
};

struct FailureConfig {
  // How many times a failed worker group (a worker, its node or a collective
  // failed) is replaced and resumed from the latest checkpoint; -1: unlimited.
  int max_failures = 0;
};

enum class CheckpointOrder { kMax, kMin };

struct CheckpointConfig {
  // How many checkpoints to keep (0: all). Without a score attribute: the
  // newest; with one: the best by it. The latest is always kept as well, so a
  // restart resumes from it.
  int num_to_keep = 0;
  std::string checkpoint_score_attribute;  // a metric of Report; empty: by age
  CheckpointOrder checkpoint_score_order = CheckpointOrder::kMax;
};

struct RunConfig {
  std::string name = "lumen_train";      // the experiment name (run directory name)
  std::string storage_path = "/tmp/lumen_train_runs";  // must be shared by every node
  FailureConfig failure;
  CheckpointConfig checkpoint;
  // Start from the newest checkpoint already under storage_path/name (a
  // previous run of this experiment), instead of from scratch.
  bool resume_from_storage = false;
  // One line per report on stdout (epoch, metrics, samples/s, time shares).
  bool verbose = true;
  // How often the driver looks for reports and finished workers.
  std::chrono::milliseconds poll_period = std::chrono::milliseconds(20);
};

}  // namespace lumen::train
