// What DataParallelTrainer::Fit returns, and what a checkpoint is.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "lumen/common/codec.h"

namespace lumen::train {

// Metrics as reported by the train loop (rank 0's become the result's).
using Metrics = std::map<std::string, double>;

// A persisted checkpoint: a directory of files under storage_path/name.
struct Checkpoint {
  std::string path;     // storage_path/name/checkpoint_NNNNNN
  int64_t index = 0;    // NNNNNN: the report that saved it
  Metrics metrics;      // that report's metrics
  LUMEN_SERIALIZE(path, index, metrics);
};

// Per-run summary of where time went (means over the reports).
struct TimeSummary {
  double samples_per_second = 0;
  double compute_share = 0, allreduce_share = 0, data_wait_share = 0, checkpoint_share = 0,
         framework_share = 0;
};

struct Result {
  Metrics metrics;                     // the last report of rank 0
  std::optional<Checkpoint> checkpoint;  // the latest persisted checkpoint
  std::vector<Checkpoint> best_checkpoints;  // those kept, best first (by score or age)
  std::vector<Metrics> history;        // every report of rank 0, in order
  std::string path;                    // storage_path/name (metrics.csv is there)
  std::optional<std::string> error;    // set when the run failed (after max_failures)
  int num_failures = 0;                // worker groups that failed and were replaced
  TimeSummary time;
  bool ok() const { return !error.has_value(); }
};

// The metrics the trainer adds to every report (besides the loop's own).
inline constexpr const char* kSamplesPerSecond = "samples_per_second";
inline constexpr const char* kTimeComputeS = "time_compute_s";
inline constexpr const char* kTimeAllReduceS = "time_allreduce_s";
inline constexpr const char* kTimeDataWaitS = "time_data_wait_s";
inline constexpr const char* kTimeCheckpointS = "time_checkpoint_s";
// The trainer's own work on the loop's thread (Report's bookkeeping and its
// message to the driver); the previous interval's, as it happens after the cut.
inline constexpr const char* kTimeFrameworkS = "time_framework_s";
inline constexpr const char* kTimeTotalS = "time_total_s";
inline constexpr const char* kSteps = "steps";
inline constexpr const char* kWorldSize = "world_size";  // workers of the group that reported

}  // namespace lumen::train
