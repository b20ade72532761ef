// The trainer's seed program: y = 2x + 1 on 200 samples in [-1, 1], fitted by
// two CPU workers with DataParallelTrainer (lr 0.05, 20 epochs, batch 16).
// Prints one line per epoch (loss, samples/s, time shares) and then the fitted
// weight and bias, which approach 2 and 1.
//
//   build/examples/linear_regression [--workers N] [--storage DIR]
#include "linear_regression.h"

#include <cstdlib>
#include <cstring>
#include <iostream>

int main(int argc, char** argv) {
  lumen::Init(argc, argv);
  int workers = 2;
  std::string storage = "/tmp/lumen_train_runs";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--workers") == 0) workers = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--storage") == 0) storage = argv[i + 1];
  }
  std::vector<float> x, y;
  linreg_example::MakeData(200, &x, &y);
  lumen::train::DataParallelTrainer trainer(
      linreg_example::TrainLoop, {{"lr", 0.05}, {"epochs", 20}, {"batch_size", 16}},
      lumen::train::ScalingConfig{.num_workers = workers, .use_gpu = false},
      lumen::train::RunConfig{.name = "linreg", .storage_path = storage,
                              .failure = {.max_failures = 2}, .checkpoint = {.num_to_keep = 2}},
      {{"train", lumen::train::Dataset::FromVectors(x, y)}});
  lumen::train::Result result = trainer.Fit();
  if (!result.ok()) {
    std::cerr << "training failed: " << *result.error << "\n";
    lumen::Shutdown();
    return 1;
  }
  std::cout << "fitted weight " << result.metrics["weight"] << " bias " << result.metrics["bias"]
            << " (expected 2 and 1)\n";
  lumen::Shutdown();
  return 0;
}
