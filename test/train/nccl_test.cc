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
#include <cuda_bf16.h>  // before collective.h: spans of __half / __nv_bfloat16 are elements then
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <string>
#include <vector>

#include "lumen/lumen.h"
#include "lumen/train/collective.h"
#include "test/core/test_support.h"
#include "test/train/nccl_test_support.h"

namespace col = lumen::collective;
using lumen::test::DeviceToHost;
using lumen::test::FillDevice;
using lumen::test::NcclTestTypeSize;
using lumen::test::TestValue;

namespace {

int GpuCount() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

// Runs `kind` (0 all-reduce, 1 all-gather, 2 reduce-scatter, 3 broadcast from
// the last rank) on a span of T over device memory, on `stream`.
template <class T>
void RunKind(const std::string& group, int kind, col::ReduceOp op, T* in, T* out, size_t n,
             size_t out_n, int world, col::CudaStream stream) {
  if (kind == 0) col::AllReduce(std::span<T>(in, n), op, group, stream);
  if (kind == 1) col::AllGather(std::span<const T>(in, n), std::span<T>(out, out_n), group, stream);
  if (kind == 2) col::ReduceScatter(std::span<const T>(in, n), std::span<T>(out, out_n), op, group, stream);
  if (kind == 3) col::Broadcast(std::span<T>(in, n), world - 1, group, stream);
}

class GpuMember {
 public:
  static GpuMember* Create() { return new GpuMember(); }
  // One op on a device copy of this rank's input (type: NcclTestType); the
  // result as doubles. `own_stream`: on a stream of its own instead of the
  // current (default) one.
  std::vector<double> Run(std::string group, int kind, int type, int op, int64_t n, bool own_stream) {
    int rank = col::GetRank(group), world = col::GetWorldSize(group);
    size_t out_n = kind == 1 ? n * world : kind == 2 ? col::ReduceScatterCount(n, rank, world) : n;
    size_t es = NcclTestTypeSize(type);
    void *in = nullptr, *out = nullptr;
    cudaMalloc(&in, std::max<size_t>(1, n) * es);
    cudaMalloc(&out, std::max<size_t>(1, out_n) * es);
    cudaStream_t stream = nullptr;
    if (own_stream) cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    FillDevice(type, rank, n, in, stream);
    col::CudaStream s = own_stream ? col::CudaStream(stream) : col::CudaStream();
    auto rop = static_cast<col::ReduceOp>(op);
    switch (type) {
      case 0: RunKind(group, kind, rop, static_cast<float*>(in), static_cast<float*>(out), n, out_n, world, s); break;
      case 1: RunKind(group, kind, rop, static_cast<double*>(in), static_cast<double*>(out), n, out_n, world, s); break;
      case 2: RunKind(group, kind, rop, static_cast<int32_t*>(in), static_cast<int32_t*>(out), n, out_n, world, s); break;
      case 3: RunKind(group, kind, rop, static_cast<int64_t*>(in), static_cast<int64_t*>(out), n, out_n, world, s); break;
      // The 16-bit types both ways: Lumen's tag type and CUDA's own.
      case 4: RunKind(group, kind, rop, static_cast<__half*>(in), static_cast<__half*>(out), n, out_n, world, s); break;
      default: RunKind(group, kind, rop, static_cast<col::BFloat16*>(in), static_cast<col::BFloat16*>(out), n, out_n, world, s); break;
    }
    auto result = DeviceToHost(type, kind == 1 || kind == 2 ? out : in, kind == 1 || kind == 2 ? out_n : n);
    if (stream) cudaStreamDestroy(stream);
    cudaFree(in);
    cudaFree(out);
    return result;
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

// The expected result for rank `rank`, computed in the element type for the
// 32/64-bit types (integer average truncates) and in double for the 16-bit
// ones (only ops whose results stay small integers are run on those).
template <class T>
std::vector<double> Expected(int kind, int op, int rank, int world, size_t n) {
  std::vector<double> full(n);
  for (size_t i = 0; i < n; ++i) {
    T acc = static_cast<T>(TestValue(0, i));
    for (int r = 1; r < world; ++r) {
      T v = static_cast<T>(TestValue(r, i));
      acc = op == 1 ? acc * v : op == 2 ? std::min(acc, v) : op == 3 ? std::max(acc, v) : acc + v;
    }
    if (op == 4) acc = static_cast<T>(acc / static_cast<T>(world));
    full[i] = static_cast<double>(acc);
  }
  if (kind == 0) return full;
  if (kind == 3) {
    std::vector<double> root(n);
    for (size_t i = 0; i < n; ++i) root[i] = TestValue(world - 1, i);
    return root;
  }
  if (kind == 1) {
    std::vector<double> all;
    for (int r = 0; r < world; ++r)
      for (size_t i = 0; i < n; ++i) all.push_back(TestValue(r, i));
    return all;
  }
  size_t offset = 0;
  for (int r = 0; r < rank; ++r) offset += col::ReduceScatterCount(n, r, world);
  return std::vector<double>(full.begin() + offset,
                             full.begin() + offset + col::ReduceScatterCount(n, rank, world));
}

std::vector<double> ExpectedFor(int type, int kind, int op, int rank, int world, size_t n) {
  switch (type) {
    case 0: return Expected<float>(kind, op, rank, world, n);
    case 1: return Expected<double>(kind, op, rank, world, n);
    case 2: return Expected<int32_t>(kind, op, rank, world, n);
    case 3: return Expected<int64_t>(kind, op, rank, world, n);
    default: return Expected<double>(kind, op, rank, world, n);
  }
}

// The reductions checked for a type: every one for the 32/64-bit types; sum,
// min and max for the 16-bit ones (products and averages are not exact there).
std::vector<int> OpsFor(int type, int kind) {
  if (kind != 0 && kind != 2) return {0};
  if (type >= 4) return {0, 2, 3};
  return {0, 1, 2, 3, 4};
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
  for (int type = 0; type < 6; ++type) {
    for (size_t n : {size_t{0}, size_t{1}, size_t{1001}, size_t{1} << 20}) {
      for (int kind = 0; kind < 4; ++kind) {
        for (int op : OpsFor(type, kind)) {
          // The default stream, and (for the larger sizes) a stream of the member's own.
          for (bool own_stream : {false, true}) {
            if (own_stream && n < 1001) continue;
            std::vector<lumen::ObjectRef<std::vector<double>>> got;
            for (auto& m : members)
              got.push_back(m.Task(&GpuMember::Run).Remote(std::string("gpu"), kind, type, op,
                                                           static_cast<int64_t>(n), own_stream));
            for (int r = 0; r < gpus; ++r) {
              INFO("kind " << kind << " type " << type << " op " << op << " n " << n << " rank " << r
                           << " own stream " << own_stream);
              REQUIRE(*lumen::Get(got[r]) == ExpectedFor(type, kind, op, r, gpus, n));
            }
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
              worst * 1e3, algbw, gpus > 1 ? algbw * 2.0 * (gpus - 1) / gpus : 0.0);
  std::printf("(bus bandwidth = algbw x 2(n-1)/n, the nccl-tests convention: 0 for a single GPU, "
              "where nothing crosses a link)\n");
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
