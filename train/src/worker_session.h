// The worker side of one attempt of a run: its setup, the collective group it
// joined, its timers, the checkpoint it resumes from and the reports it made.
// A TrainContext is a handle on it. Used from the train loop's thread (the
// timers are shared with the prefetch thread and are atomic).
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "lumen/common/thread_checker.h"
#include "lumen/train/step_timers.h"
#include "lumen/train/train_context.h"

namespace lumen::train {

class WorkerSession {
 public:
  explicit WorkerSession(WorkerSetup setup);
  const WorkerSetup& setup() const { return setup_; }
  const std::shared_ptr<StepTimers>& timers() const { return timers_; }

  // Joins / leaves this attempt's collective group.
  void JoinGroup();
  void LeaveGroup();

  void Report(const Metrics& metrics, const std::string& checkpoint_dir);
  const std::optional<Checkpoint>& latest_checkpoint() const { return latest_; }
  std::string NewCheckpointDir();

 private:
  // Rank 0: renames `dir` to run_dir/checkpoint_NNNNNN; returns what it became.
  Checkpoint Persist(const std::string& dir, const Metrics& metrics);

  WorkerSetup setup_;
  std::shared_ptr<StepTimers> timers_ = std::make_shared<StepTimers>();
  std::optional<Checkpoint> latest_;
  int64_t next_index_;
  int64_t temp_counter_ = 0;
  std::optional<StepTimers::Clock::time_point> checkpoint_started_;
  ThreadChecker loop_thread_;  // Report and NewCheckpointDir: the train loop's thread
};

}  // namespace lumen::train
