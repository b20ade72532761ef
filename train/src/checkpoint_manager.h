// Which persisted checkpoints a run keeps: the newest `num_to_keep`, or the
// best by `checkpoint_score_attribute` (checkpoints without that metric rank
// last), and always the latest (a restart resumes from it). Pure bookkeeping:
// it says what to delete, the caller deletes. Driver thread only.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "lumen/train/result.h"
#include "lumen/train/train_config.h"

namespace lumen::train::internal {

class CheckpointManager {
 public:
  explicit CheckpointManager(CheckpointConfig config) : config_(std::move(config)) {}
  // Records checkpoint `c` (the newest); returns those no longer kept.
  [[nodiscard]] std::vector<Checkpoint> Add(Checkpoint c);
  const std::optional<Checkpoint>& latest() const { return latest_; }
  // What is kept, best first.
  std::vector<Checkpoint> Kept() const;

  // The complete checkpoint_NNNNNN directories under `run_dir`, oldest first
  // (their metrics unknown); removes half-written temporary ones.
  static std::vector<Checkpoint> Scan(const std::string& run_dir);

 private:
  bool Better(const Checkpoint& a, const Checkpoint& b) const;
  CheckpointConfig config_;
  std::vector<Checkpoint> kept_;
  std::optional<Checkpoint> latest_;
};

}  // namespace lumen::train::internal
