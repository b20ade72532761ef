// bench/train_scaling: does adding workers pay off? The MLP example at a fixed
// global batch (each worker takes 1/N of it, so the training is the same) on
// 1 and 2 CPU workers, with bucketed all-reduce overlapping the backward pass
// and with overlap off. Prints samples/s, the speedup over 1 worker and the
// per-step split into compute, all-reduce, data wait, checkpoint and the
// trainer's own work (milliseconds per
// step, from the trainer's own metrics of the last epoch; the first epoch is
// a warm-up; each configuration runs --repeat times and the fastest counts,
// as machines shared with other work are noisy).
//
//   build/bin/lumen-train-scaling [--samples N] [--global-batch B] [--hidden H] [--epochs E]
//                                 [--repeat R]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <string>
#include <unistd.h>

#include "examples/mlp.h"

namespace {

struct Row {
  double samples_per_s = 0, compute_ms = 0, allreduce_ms = 0, data_ms = 0, ckpt_ms = 0,
         trainer_ms = 0;
};

Row Run(int workers, bool overlap, int global_batch, int hidden, int epochs,
        const lumen::train::Dataset& data, const std::string& storage) {
  lumen::train::DataParallelTrainer trainer(
      mlp_example::TrainLoop,
      {{"epochs", epochs}, {"global_batch", global_batch}, {"lr", 0.05}, {"inputs", 128},
       {"hidden", hidden}, {"classes", 10}, {"overlap", overlap ? 1 : 0}, {"bucket_kib", 256},
       {"checkpoint", 0}},
      lumen::train::ScalingConfig{.num_workers = workers},
      lumen::train::RunConfig{.name = "scaling", .storage_path = storage, .verbose = false},
      {{"train", data}});
  lumen::train::Result r = trainer.Fit();
  if (!r.ok()) {
    std::cerr << "train_scaling: " << *r.error << "\n";
    std::exit(1);
  }
  const auto& m = r.history.back();  // the last epoch: past the warm-up
  const double steps = std::max(1.0, m.at(lumen::train::kSteps));
  Row row;
  row.samples_per_s = m.at(lumen::train::kSamplesPerSecond);
  row.compute_ms = 1e3 * m.at(lumen::train::kTimeComputeS) / steps;
  row.allreduce_ms = 1e3 * m.at(lumen::train::kTimeAllReduceS) / steps;
  row.data_ms = 1e3 * m.at(lumen::train::kTimeDataWaitS) / steps;
  row.ckpt_ms = 1e3 * m.at(lumen::train::kTimeCheckpointS) / steps;
  row.trainer_ms = 1e3 * m.at(lumen::train::kTimeFrameworkS) / steps;
  return row;
}

}  // namespace

int main(int argc, char** argv) {
  lumen::Config config;
  config.num_cpus = 2;
  lumen::Init(config, argc, argv);
  std::vector<float> x, y;
  std::string storage = (std::filesystem::temp_directory_path() /
                         ("lumen-train-scaling-" + std::to_string(::getpid())))
                            .string();
  lumen::train::Dataset data;
  int samples = 8192, global_batch = 512, hidden = 512, epochs = 2, repeat = 2;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--samples") == 0) samples = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--global-batch") == 0) global_batch = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--hidden") == 0) hidden = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--epochs") == 0) epochs = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--repeat") == 0) repeat = std::max(1, std::atoi(argv[i + 1]));
  }
  mlp_example::MakeData(samples, 128, 10, &x, &y);
  data = lumen::train::Dataset::FromArrays(x, 128, y, 1);
  auto best = [&](int workers, bool overlap) {
    Row fastest;
    for (int r = 0; r < repeat; ++r) {
      Row row = Run(workers, overlap, global_batch, hidden, epochs, data, storage);
      if (row.samples_per_s > fastest.samples_per_s) fastest = row;
    }
    return fastest;
  };
  std::printf("MLP 128-%d-10, %d samples, global batch %d, %d epochs (last one measured)\n",
              hidden, samples, global_batch, epochs);
  std::printf("%-8s %-8s %12s %8s %11s %13s %10s %10s %11s\n", "workers", "overlap",
              "samples/s", "speedup", "compute ms", "allreduce ms", "data ms", "ckpt ms",
              "trainer ms");
  for (bool overlap : {true, false}) {
    Row one = best(1, overlap);
    Row two = best(2, overlap);
    for (auto [n, row] : {std::pair{1, one}, std::pair{2, two}}) {
      std::printf("%-8d %-8s %12.0f %8.2f %11.2f %13.2f %10.2f %10.2f %11.3f\n", n,
                  overlap ? "on" : "off", row.samples_per_s, row.samples_per_s / one.samples_per_s,
                  row.compute_ms, row.allreduce_ms, row.data_ms, row.ckpt_ms, row.trainer_ms);
    }
  }
  std::error_code ec;
  std::filesystem::remove_all(storage, ec);
  lumen::Shutdown();
  return 0;
}
