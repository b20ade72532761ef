// DataParallelTrainer with use_gpu on the GPUs of this machine: each worker
// holds one GPU (CUDA_VISIBLE_DEVICES names one device, GetGpuIds one id) and
// TrainContext::AllReduce runs on NCCL over device buffers. Where the MLP
// example's cuBLAS path is built (LUMEN_MLP_WITH_CUDA), a first case checks
// that it computes the CPU path's gradients on one batch (within 1e-4).
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

#ifdef LUMEN_MLP_WITH_CUDA
#define MLP_EXAMPLE_NO_LOOP_REGISTRATION
#include <cmath>

#include "mlp.h"
#include "mlp_cuda.h"
#endif

namespace {

#ifdef LUMEN_MLP_WITH_CUDA
// Invariant: on the same batch and parameters the cuBLAS path adds the same
// gradients as the CPU path (max abs difference <= 1e-4), in the same
// ready() order and spans, and returns the same loss and correct count.
bool CublasMatchesCpu() {
  const int inputs = 16, hidden = 32, classes = 4, n = 24;
  std::vector<float> x, y;
  mlp_example::MakeData(n, inputs, classes, &x, &y);
  lumen::train::Batch batch{.size = n, .feature_dim = inputs, .label_dim = 1,
                            .features = x, .labels = y};
  mlp_example::Mlp cpu(inputs, hidden, classes), gpu_host(inputs, hidden, classes);
  std::vector<size_t> cpu_spans, gpu_spans;
  int cpu_correct = 0, gpu_correct = 0;
  const double cpu_loss = cpu.Backward(batch, &cpu_correct, [&](std::span<float> g) {
    cpu_spans.push_back(static_cast<size_t>(g.data() - cpu.grads.data()));
    cpu_spans.push_back(g.size());
  });
  mlp_example::MlpCuda gpu(&gpu_host);
  const double gpu_loss = gpu.Backward(batch, &gpu_correct, [&](std::span<float> g) {
    gpu_spans.push_back(static_cast<size_t>(g.data() - gpu_host.grads.data()));
    gpu_spans.push_back(g.size());
  });
  float worst = 0;
  for (size_t i = 0; i < cpu.grads.size(); ++i)
    worst = std::max(worst, std::abs(cpu.grads[i] - gpu_host.grads[i]));
  const bool pass = worst <= 1e-4f && cpu_spans == gpu_spans && cpu_correct == gpu_correct &&
                    std::abs(cpu_loss - gpu_loss) <= 1e-3 * n;
  std::printf("%s: cuBLAS MLP gradients vs CPU: max |diff| %g, spans %s, loss %g vs %g\n",
              pass ? "PASSED" : "FAILED", worst, cpu_spans == gpu_spans ? "same" : "DIFFER",
              gpu_loss, cpu_loss);
  return pass;
}
#endif

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
#ifdef LUMEN_MLP_WITH_CUDA
  if (!CublasMatchesCpu()) return 1;
#endif
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
