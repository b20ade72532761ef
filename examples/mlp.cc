// A small MLP classifier (Gaussian blobs, one hidden layer, hand-written
// backward pass on the CPU, or GEMMs through cuBLAS with --gpu) trained
// data-parallel on 1 to N workers with bucketed, overlapped gradient
// all-reduce and a checkpoint every epoch.
//
//   build/examples/mlp [--workers N] [--epochs E] [--storage DIR] [--gpu]
//
// The global batch stays the same whatever N (each worker takes 1/N of it),
// so adding workers changes the parallelism, not the training. --gpu asks for
// one GPU per worker and the cuBLAS path (mlp_cuda.h); a binary built without
// CUDA, or a machine without a GPU, says so and runs on the CPU.
#include "mlp.h"

#include <cstdlib>
#include <cstring>
#include <iostream>

int main(int argc, char** argv) {
  lumen::Init(argc, argv);
  int workers = 2, epochs = 5;
  std::string storage = "/tmp/lumen_train_runs";
  bool gpu = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--gpu") == 0) gpu = true;
    if (i + 1 >= argc) continue;
    if (std::strcmp(argv[i], "--workers") == 0) workers = std::atoi(argv[++i]);
    else if (std::strcmp(argv[i], "--epochs") == 0) epochs = std::atoi(argv[++i]);
    else if (std::strcmp(argv[i], "--storage") == 0) storage = argv[++i];
  }
  if (gpu) {
#ifdef LUMEN_MLP_WITH_CUDA
    if (!mlp_example::CudaDeviceAvailable()) {
      std::cout << "--gpu: no GPU visible; falling back to the CPU\n";
      gpu = false;
    }
#else
    std::cout << "--gpu: this binary was built without CUDA; falling back to the CPU\n";
    gpu = false;
#endif
  }
  const int inputs = 16, classes = 4;
  std::vector<float> x, y;
  mlp_example::MakeData(4096, inputs, classes, &x, &y);
  lumen::train::DataParallelTrainer trainer(
      mlp_example::TrainLoop,
      {{"epochs", epochs}, {"global_batch", 64}, {"lr", 0.1}, {"inputs", inputs},
       {"hidden", 64}, {"classes", classes}, {"use_gpu", gpu ? 1 : 0}},
      lumen::train::ScalingConfig{.num_workers = workers, .use_gpu = gpu},
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
