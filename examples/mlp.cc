// A small MLP classifier (Gaussian blobs, one hidden layer, hand-written
// backward pass on the CPU) trained data-parallel on 1 to N CPU workers with
// bucketed, overlapped gradient all-reduce and a checkpoint every epoch.
//
//   build/examples/mlp [--workers N] [--epochs E] [--storage DIR]
//
// The global batch stays the same whatever N (each worker takes 1/N of it),
// so adding workers changes the parallelism, not the training. (A cuBLAS path
// is not there yet: the CPU path is the one to read.)
#include "mlp.h"

#include <cstdlib>
#include <cstring>
#include <iostream>

int main(int argc, char** argv) {
  lumen::Init(argc, argv);
  int workers = 2, epochs = 5;
  std::string storage = "/tmp/lumen_train_runs";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--workers") == 0) workers = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--epochs") == 0) epochs = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--storage") == 0) storage = argv[i + 1];
  }
  const int inputs = 16, classes = 4;
  std::vector<float> x, y;
  mlp_example::MakeData(4096, inputs, classes, &x, &y);
  lumen::train::DataParallelTrainer trainer(
      mlp_example::TrainLoop,
      {{"epochs", epochs}, {"global_batch", 64}, {"lr", 0.1}, {"inputs", inputs},
       {"hidden", 64}, {"classes", classes}},
      lumen::train::ScalingConfig{.num_workers = workers},
      lumen::train::RunConfig{.name = "mlp", .storage_path = storage,
                              .failure = {.max_failures = 1}, .checkpoint = {.num_to_keep = 1}},
      {{"train", lumen::train::Dataset::FromArrays(x, inputs, y, 1)}});
  lumen::train::Result result = trainer.Fit();
  if (!result.ok()) {
    std::cerr << "training failed: " << *result.error << "\n";
    lumen::Shutdown();
    return 1;
  }
  std::cout << "final accuracy " << result.metrics["accuracy"] << ", loss "
            << result.metrics["loss"] << ", " << result.time.samples_per_second
            << " samples/s\n";
  lumen::Shutdown();
  return 0;
}
