// lumen::train::DataParallelTrainer: data-parallel training over a worker
// group, the C++ counterpart of Ray Train's DataParallelTrainer. It reserves
// one placement-group bundle per worker, starts the workers as actors in it,
// joins them in a collective group (Gloo on CPU, NCCL with use_gpu), hands
// each its data shard, collects rank 0's reports and checkpoints, and replaces
// a failed group (resuming from the latest checkpoint) up to max_failures.
//
//   void TrainLoop(lumen::train::TrainContext& ctx) { ... ctx.Report({{"loss", l}}); }
//   LUMEN_REMOTE(TrainLoop);
//
//   lumen::train::DataParallelTrainer trainer(
//       TrainLoop, {{"lr", 0.05}, {"epochs", 20}},
//       lumen::train::ScalingConfig{.num_workers = 2},
//       lumen::train::RunConfig{.name = "linreg", .storage_path = "/shared/runs"},
//       {{"train", lumen::train::Dataset::FromVectors(x, y)}});
//   lumen::train::Result result = trainer.Fit();
//
// Uses only the public API (lumen/lumen.h, lumen::collective). Fit runs on the
// driver's calling thread and blocks until the run ends; it reports failures
// in Result::error instead of throwing (it throws lumen::Error only for a
// misconfiguration: an unregistered loop, num_workers < 1).
// See doc/train.md.
#pragma once

#include <map>
#include <string>

#include "lumen/train/dataset.h"
#include "lumen/train/result.h"
#include "lumen/train/train_config.h"
#include "lumen/train/train_context.h"

namespace lumen::train {

using TrainLoop = void (*)(TrainContext&);

class DataParallelTrainer {
 public:
  DataParallelTrainer(TrainLoop loop, TrainLoopConfig config, ScalingConfig scaling,
                      RunConfig run, std::map<std::string, Dataset> datasets = {});
  // Pad (false, torch's default) or drop (true) the rows that do not divide
  // evenly among the workers.
  DataParallelTrainer& SetDropLast(bool drop_last) {
    drop_last_ = drop_last;
    return *this;
  }
  Result Fit();

 private:
  std::string loop_name_;
  TrainLoopConfig config_;
  ScalingConfig scaling_;
  RunConfig run_;
  std::map<std::string, Dataset> datasets_;
  bool drop_last_ = false;
};

}  // namespace lumen::train
