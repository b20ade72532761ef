// The worker actor of a DataParallelTrainer: one per placement-group bundle.
// Run joins the attempt's collective group, runs the registered train loop
// with a TrainContext, and leaves the group. Runs on the actor's (single)
// task thread.
#pragma once

#include <string>

#include "lumen/train/train_context.h"

namespace lumen::train::internal {

class TrainWorker {
 public:
  static TrainWorker* Create(WorkerSetup setup);
  // Runs train loop `loop_name` (a LUMEN_REMOTE function taking TrainContext&)
  // to the end; returns this worker's rank. What the loop throws propagates
  // (a TaskError on the driver).
  int Run(std::string loop_name);
  // The pid of the worker process (tests kill it).
  int Pid();

 private:
  explicit TrainWorker(WorkerSetup setup) : setup_(std::move(setup)) {}
  WorkerSetup setup_;
};

}  // namespace lumen::train::internal
