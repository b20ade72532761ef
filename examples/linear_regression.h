// The linear-regression train loop of examples/linear_regression.cc, in a
// header so the trainer tests run the very same loop: y = 2x + 1 fitted by SGD
// on mean squared error, gradients averaged over the workers every batch,
// a checkpoint (weight, bias, epoch) every epoch.
//
// Config keys: lr, epochs, batch_size; for the failure tests also
// kill_rank / kill_epoch (that rank SIGKILLs its own process when it reaches
// that epoch on a run that started without a checkpoint; with kill_always it
// does so on every attempt), and epoch_sleep_ms (a slower model: that long
// per epoch, so a test can act mid-run).
// Include it in one source file per binary (it registers the loop with LUMEN_TRAIN_LOOP).
#pragma once

#include <lumen/lumen.h>
#include <lumen/train/trainer.h>
#include <signal.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <thread>
#include <random>
#include <vector>

namespace linreg_example {

// `n` samples of x uniform in [-1, 1] (seeded), y = 2x + 1.
inline void MakeData(int n, std::vector<float>* x, std::vector<float>* y) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  x->resize(n);
  y->resize(n);
  for (int i = 0; i < n; ++i) {
    (*x)[i] = u(rng);
    (*y)[i] = 2.f * (*x)[i] + 1.f;
  }
}

inline void TrainLoop(lumen::train::TrainContext& ctx) {
  auto shard = ctx.GetDatasetShard("train");
  double w = 0, b = 0;
  int start_epoch = 0;
  const bool resumed = ctx.GetCheckpoint().has_value();
  if (resumed) {
    std::ifstream in(std::filesystem::path(ctx.GetCheckpoint()->path) / "model.txt");
    in >> w >> b >> start_epoch;
    ++start_epoch;  // the checkpoint was taken after that epoch
  }
  const double lr = ctx.Config<double>("lr");
  const int epochs = ctx.Config<int>("epochs");
  const int batch_size = ctx.Config<int>("batch_size");
  const int kill_rank = ctx.Config<int>("kill_rank", -1);
  const int kill_epoch = ctx.Config<int>("kill_epoch", -1);
  const bool kill_always = ctx.Config<int>("kill_always", 0) != 0;
  const auto epoch_sleep = std::chrono::milliseconds(ctx.Config<int>("epoch_sleep_ms", 0));
  for (int epoch = start_epoch; epoch < epochs; ++epoch) {
    if (ctx.GetWorldRank() == kill_rank && epoch == kill_epoch && (!resumed || kill_always)) {
      ::raise(SIGKILL);  // a worker dying mid-run, as a crash would
    }
    std::this_thread::sleep_for(epoch_sleep);
    std::vector<double> totals{0, 0};  // squared error, samples
    for (const lumen::train::Batch& batch : shard.Batches(batch_size, /*seed=*/epoch)) {
      std::vector<double> grad{0, 0};
      for (int64_t i = 0; i < batch.size; ++i) {
        const double x = batch.x(i)[0], err = w * x + b - batch.y(i)[0];
        grad[0] += 2 * err * x / batch.size;
        grad[1] += 2 * err / batch.size;
        totals[0] += err * err;
      }
      totals[1] += static_cast<double>(batch.size);
      ctx.AllReduce(grad, lumen::collective::ReduceOp::kAverage);
      w -= lr * grad[0];
      b -= lr * grad[1];
    }
    ctx.AllReduce(totals, lumen::collective::ReduceOp::kSum);
    const std::string dir = ctx.NewCheckpointDir();
    std::ofstream(std::filesystem::path(dir) / "model.txt") << w << " " << b << " " << epoch << "\n";
    ctx.Report({{"epoch", epoch}, {"loss", totals[0] / totals[1]}, {"weight", w}, {"bias", b}}, dir);
  }
}

}  // namespace linreg_example

LUMEN_TRAIN_LOOP(linreg_example::TrainLoop);
