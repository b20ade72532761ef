// DataParallelTrainer with use_gpu on the GPUs of this machine: each worker
// holds one GPU (CUDA_VISIBLE_DEVICES names one device, GetGpuIds one id) and
// TrainContext::AllReduce runs on NCCL over device buffers.
//
// Exits 77 (CTest: SKIPPED) and says why when Lumen was built without CUDA and
// NCCL or when no GPU is visible.
#include <cstdio>
#include <cstdlib>

#ifndef LUMEN_WITH_NCCL

int main() {
  std::printf("SKIPPED: Lumen was built without the CUDA Toolkit and NCCL (none under "
              "LUMEN_CUDA_ROOT); the trainer's GPU path needs both and a GPU\n");
  return 77;
}

#else

#include <cuda_runtime.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "lumen/lumen.h"
#include "lumen/train/trainer.h"

namespace {

int GpuCount() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

// Each rank all-reduces (sum) 1 Mi floats of value rank + 1 on its GPU; rank 0
// reports whether every element came back as the sum over the ranks, and
// whether each worker saw exactly one GPU.
void GpuLoop(lumen::train::TrainContext& ctx) {
  const size_t n = 1 << 20;
  std::vector<float> host(n, static_cast<float>(ctx.GetWorldRank() + 1));
  float* device = nullptr;
  if (cudaMalloc(&device, n * sizeof(float)) != cudaSuccess) throw std::runtime_error("cudaMalloc");
  cudaMemcpy(device, host.data(), n * sizeof(float), cudaMemcpyHostToDevice);
  ctx.AllReduce(std::span<float>(device, n), lumen::collective::ReduceOp::kSum);
  cudaMemcpy(host.data(), device, n * sizeof(float), cudaMemcpyDeviceToHost);
  cudaFree(device);
  const int world = ctx.GetWorldSize();
  const float expected = static_cast<float>(world * (world + 1) / 2);
  const bool sums = std::all_of(host.begin(), host.end(), [&](float v) { return v == expected; });
  std::vector<double> ok{sums ? 1.0 : 0.0, lumen::GetGpuIds().size() == 1 ? 1.0 : 0.0,
                         GpuCount() == 1 ? 1.0 : 0.0};
  ctx.Report({{"sums_ok", ok[0]}, {"one_gpu_id", ok[1]}, {"one_visible_device", ok[2]}});
}

}  // namespace

LUMEN_TRAIN_LOOP(GpuLoop);

int main(int argc, char** argv) {
  if (const char* role = std::getenv("LUMEN_ROLE"); role && *role) lumen::Init(argc, argv);
  const int gpus = GpuCount();
  if (gpus == 0) {
    std::printf("SKIPPED: no GPU visible to this process (cudaGetDeviceCount); the trainer's GPU "
                "path needs one\n");
    return 77;
  }
  lumen::Config config;
  config.num_cpus = 4;
  config.num_gpus = gpus;
  lumen::Init(config, argc, argv);
  const std::string storage =
      (std::filesystem::temp_directory_path() / ("trainer-gpu-" + std::to_string(::getpid())))
          .string();
  const int workers = std::min(gpus, 2);
  lumen::train::Result r = lumen::train::DataParallelTrainer(
                               GpuLoop, {}, lumen::train::ScalingConfig{.num_workers = workers,
                                                                        .use_gpu = true},
                               lumen::train::RunConfig{.name = "gpu", .storage_path = storage,
                                                       .verbose = false})
                               .Fit();
  std::error_code ec;
  std::filesystem::remove_all(storage, ec);
  lumen::Shutdown();
  if (!r.ok()) {
    std::printf("FAILED: %s\n", r.error->c_str());
    return 1;
  }
  const bool pass = r.metrics["sums_ok"] == 1 && r.metrics["one_gpu_id"] == 1 &&
                    r.metrics["one_visible_device"] == 1;
  std::printf("%s: %d GPU worker(s): NCCL all-reduce sums %s, one GPU id per worker %s, one "
              "visible device per worker %s\n",
              pass ? "PASSED" : "FAILED", workers, r.metrics["sums_ok"] == 1 ? "ok" : "WRONG",
              r.metrics["one_gpu_id"] == 1 ? "ok" : "WRONG",
              r.metrics["one_visible_device"] == 1 ? "ok" : "WRONG");
  return pass ? 0 : 1;
}

#endif
