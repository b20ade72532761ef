// The NCCL backend of lumen::collective on the GPUs of this machine: one actor
// per GPU, every op checked against a result computed here, then the NCCL
// all-reduce bus bandwidth for 1 GiB (printed for scripts/gpu-check).
//
// Exits 77 (CTest: SKIPPED) and says why when Lumen was built without CUDA and
// NCCL or when no GPU is visible.
#include <cstdio>
#include <cstdlib>

#ifndef LUMEN_WITH_NCCL

int main() {
  std::printf("SKIPPED: Lumen was built without the CUDA Toolkit and NCCL (none under "
              "LUMEN_CUDA_ROOT); the NCCL tests need both and a GPU\n");
  return 77;
}

#else

#define CATCH_CONFIG_RUNNER
#include <cuda_runtime.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <string>
#include <vector>

#include "lumen/lumen.h"
#include "lumen/train/collective.h"
#include "test/core/test_support.h"

namespace col = lumen::collective;

namespace {

int GpuCount() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

template <class T>
T Value(int rank, size_t i) {
  return static_cast<T>(static_cast<int64_t>(((rank + 1) * 3 + static_cast<int64_t>(i % 1000) * 7) % 11) - 5);
}

// Runs one op on a device copy of this rank's input; returns the result (host).
template <class T>
std::vector<double> OnDevice(const std::string& group, int kind, int op, size_t n) {
  int rank = col::GetRank(group), world = col::GetWorldSize(group);
  std::vector<T> host(n);
  for (size_t i = 0; i < n; ++i) host[i] = Value<T>(rank, i);
  size_t out_n = kind == 1 ? n * world : kind == 2 ? col::ReduceScatterCount(n, rank, world) : n;
  T *in = nullptr, *out = nullptr;
  cudaMalloc(&in, std::max<size_t>(1, n) * sizeof(T));
  cudaMalloc(&out, std::max<size_t>(1, out_n) * sizeof(T));
  cudaMemcpy(in, host.data(), n * sizeof(T), cudaMemcpyHostToDevice);
  auto rop = static_cast<col::ReduceOp>(op);
  if (kind == 0) col::AllReduce(std::span<T>(in, n), rop, group);
  if (kind == 1) col::AllGather(std::span<const T>(in, n), std::span<T>(out, out_n), group);
  if (kind == 2) col::ReduceScatter(std::span<const T>(in, n), std::span<T>(out, out_n), rop, group);
  if (kind == 3) col::Broadcast(std::span<T>(in, n), world - 1, group);
  std::vector<T> result(kind == 1 || kind == 2 ? out_n : n);
  cudaMemcpy(result.data(), kind == 1 || kind == 2 ? out : in, result.size() * sizeof(T),
             cudaMemcpyDeviceToHost);
  cudaFree(in);
  cudaFree(out);
  return std::vector<double>(result.begin(), result.end());
}

class GpuMember {
 public:
  static GpuMember* Create() { return new GpuMember(); }
  std::vector<double> Run(std::string group, int kind, int dtype, int op, int64_t n) {
    switch (dtype) {
      case 0: return OnDevice<float>(group, kind, op, n);
      case 1: return OnDevice<double>(group, kind, op, n);
      case 2: return OnDevice<int32_t>(group, kind, op, n);
      default: return OnDevice<int64_t>(group, kind, op, n);
    }
  }
  // Seconds per all-reduce of `bytes` of float (after a warm-up).
  double TimeAllReduce(std::string group, int64_t bytes, int iters) {
    size_t n = bytes / sizeof(float);
    float* buf = nullptr;
    cudaMalloc(&buf, n * sizeof(float));
    cudaMemset(buf, 0, n * sizeof(float));
    col::AllReduce(std::span<float>(buf, n), col::ReduceOp::kSum, group);
    col::Barrier(group);
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) col::AllReduce(std::span<float>(buf, n), col::ReduceOp::kSum, group);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters;
    cudaFree(buf);
    return s;
  }
};

template <class T>
std::vector<double> Expected(int kind, int op, int rank, int world, size_t n) {
  std::vector<double> full(n);
  for (size_t i = 0; i < n; ++i) {
    T acc = Value<T>(0, i);
    for (int r = 1; r < world; ++r) {
      T v = Value<T>(r, i);
      acc = op == 1 ? acc * v : op == 2 ? std::min(acc, v) : op == 3 ? std::max(acc, v) : acc + v;
    }
    if (op == 4) acc = static_cast<T>(acc / static_cast<T>(world));
    full[i] = static_cast<double>(acc);
  }
  if (kind == 0) return full;
  if (kind == 3) {
    std::vector<double> root(n);
    for (size_t i = 0; i < n; ++i) root[i] = static_cast<double>(Value<T>(world - 1, i));
    return root;
  }
  if (kind == 1) {
    std::vector<double> all;
    for (int r = 0; r < world; ++r)
      for (size_t i = 0; i < n; ++i) all.push_back(static_cast<double>(Value<T>(r, i)));
    return all;
  }
  size_t offset = 0;
  for (int r = 0; r < rank; ++r) offset += col::ReduceScatterCount(n, r, world);
  return std::vector<double>(full.begin() + offset,
                             full.begin() + offset + col::ReduceScatterCount(n, rank, world));
}

}  // namespace

LUMEN_REMOTE(GpuMember::Create, &GpuMember::Run, &GpuMember::TimeAllReduce);

TEST_CASE("nccl: every op and dtype on one actor per GPU, and 1 GiB all-reduce bandwidth") {
  int gpus = GpuCount();
  lumen::Config config = lumen::test::ScopedCluster::DefaultConfig();
  config.num_gpus = gpus;
  config.num_cpus = std::max(2, gpus);
  lumen::test::ScopedCluster cluster(config);
  std::vector<lumen::ActorHandle<GpuMember>> members;
  for (int i = 0; i < gpus; ++i) members.push_back(lumen::Actor(GpuMember::Create).SetNumGpus(1).Remote());
  col::CreateGroup(members, {.backend = col::Backend::kNccl, .name = "gpu"});
  for (int dtype = 0; dtype < 4; ++dtype) {
    for (size_t n : {size_t{0}, size_t{1}, size_t{1001}, size_t{1} << 20}) {
      for (int kind = 0; kind < 4; ++kind) {
        for (int op = 0; op < (kind == 0 || kind == 2 ? 5 : 1); ++op) {
          std::vector<lumen::ObjectRef<std::vector<double>>> got;
          for (auto& m : members)
            got.push_back(m.Task(&GpuMember::Run).Remote(std::string("gpu"), kind, dtype, op,
                                                         static_cast<int64_t>(n)));
          for (int r = 0; r < gpus; ++r) {
            std::vector<double> want;
            switch (dtype) {
              case 0: want = Expected<float>(kind, op, r, gpus, n); break;
              case 1: want = Expected<double>(kind, op, r, gpus, n); break;
              case 2: want = Expected<int32_t>(kind, op, r, gpus, n); break;
              default: want = Expected<int64_t>(kind, op, r, gpus, n); break;
            }
            INFO("kind " << kind << " dtype " << dtype << " op " << op << " n " << n << " rank " << r);
            REQUIRE(*lumen::Get(got[r]) == want);
          }
        }
      }
    }
  }
  const int64_t bytes = int64_t{1} << 30;
  std::vector<lumen::ObjectRef<double>> times;
  for (auto& m : members) times.push_back(m.Task(&GpuMember::TimeAllReduce).Remote(std::string("gpu"), bytes, 20));
  double worst = 0;
  for (auto& t : times) worst = std::max(worst, *lumen::Get(t));
  double algbw = static_cast<double>(bytes) / worst / 1e9;
  std::printf("nccl_allreduce_1GiB gpus %d time_ms %.3f algbw %.2f GB/s busbw %.2f GB/s\n", gpus,
              worst * 1e3, algbw, algbw * 2.0 * (gpus - 1) / gpus);
}

int main(int argc, char** argv) {
  if (const char* role = std::getenv("LUMEN_ROLE"); role && *role) lumen::Init(argc, argv);
  if (GpuCount() == 0) {
    std::printf("SKIPPED: no GPU visible to this process (cudaGetDeviceCount); the NCCL tests "
                "need one\n");
    return 77;
  }
  return Catch::Session().run(argc, argv);
}

#endif
