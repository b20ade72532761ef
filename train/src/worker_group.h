// One attempt's worker group, driver side: a placement group of one bundle
// per worker, a TrainWorker actor in each bundle, and their Run calls. A
// failed group is torn down whole (actors killed, placement group removed)
// and replaced by a new one. Driver thread only.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "lumen/lumen.h"
#include "lumen/train/train_config.h"
#include "lumen/train/train_context.h"
#include "train_worker.h"

namespace lumen::train::internal {

class WorkerGroup {
 public:
  explicit WorkerGroup(ScalingConfig scaling) : scaling_(std::move(scaling)) {}
  ~WorkerGroup() { Shutdown(); }
  WorkerGroup(const WorkerGroup&) = delete;
  WorkerGroup& operator=(const WorkerGroup&) = delete;

  // Reserves the bundles; an error naming the demand if they are not placed
  // within scaling.placement_timeout.
  [[nodiscard]] absl::Status Reserve(const std::string& name);
  // Fills the rank fields of `base` per worker (world, local and node ranks
  // from where the bundles landed), starts the actors and their Run calls.
  void Start(const WorkerSetup& base, const std::string& loop_name);
  // The workers' Run results (ranks), in rank order.
  const std::vector<ObjectRef<int>>& runs() const { return runs_; }
  const std::vector<ActorHandle<TrainWorker>>& actors() const { return actors_; }
  int size() const { return scaling_.num_workers; }
  // Kills the actors and removes the placement group. Idempotent.
  void Shutdown();

 private:
  ScalingConfig scaling_;
  PlacementGroup pg_;
  std::vector<std::string> bundle_nodes_;
  std::vector<ActorHandle<TrainWorker>> actors_;
  std::vector<ObjectRef<int>> runs_;
};

}  // namespace lumen::train::internal
