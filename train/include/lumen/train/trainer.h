// lumen::train::DataParallelTrainer: data-parallel training over a worker
// group, the C++ counterpart of Ray Train's DataParallelTrainer. It reserves
// one placement-group bundle per worker, starts the workers as actors in it,
// joins them in a collective group (Gloo on CPU, NCCL with use_gpu), hands
// each its data shard, collects rank 0's reports and checkpoints, and replaces
// a failed group (resuming from the latest checkpoint) up to max_failures;
// with ScalingConfig::min_workers, elastically (fewer workers after a node
// loss, more again when the cluster has room).
//
//   void TrainLoop(lumen::train::TrainContext& ctx) { ... ctx.Report({{"loss", l}}); }
//   LUMEN_TRAIN_LOOP(TrainLoop);   // at namespace scope, like LUMEN_REMOTE
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
//
// Train loops are registered with LUMEN_TRAIN_LOOP rather than LUMEN_REMOTE:
// the runtime hands a registered function its decoded arguments as rvalues,
// which a `TrainContext&` parameter cannot bind to.
// See doc/train.md.
#pragma once

#include <map>
#include <string>

#include "lumen/train/dataset.h"
#include "lumen/train/gradient_bucketer.h"
#include "lumen/train/result.h"
#include "lumen/train/train_config.h"
#include "lumen/train/train_context.h"

namespace lumen::train {

using TrainLoop = void (*)(TrainContext&);

namespace internal {
// The train loops of this binary by name; every process of it registers the
// same ones at start-up (LUMEN_TRAIN_LOOP). Thread-safe.
bool RegisterTrainLoop(const char* name, TrainLoop loop);
std::string TrainLoopName(TrainLoop loop);      // "" if not registered
TrainLoop FindTrainLoop(const std::string& name);  // nullptr if not registered
}  // namespace internal

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

// LUMEN_TRAIN_LOOP(f1, f2, ...)-style single registration: LUMEN_TRAIN_LOOP(TrainLoop).
#define LUMEN_TRAIN_LOOP(f)                                                          \
  [[maybe_unused]] static const bool LUMEN_INTERNAL_CAT(lumen_train_loop_registered_, \
                                                        __COUNTER__) =               \
      ::lumen::train::internal::RegisterTrainLoop(#f, f);
