// Device-side helpers of nccl_test (nccl_test_support.cu, built by nvcc): fill
// a device buffer with a rank's test input and read one back as doubles, for
// every element type the NCCL backend takes, 16-bit ones included.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <vector>

namespace lumen::test {

// Element types by index: float32, float64, int32, int64, float16, bfloat16.
enum NcclTestType { kF32, kF64, kI32, kI64, kF16, kBF16 };
size_t NcclTestTypeSize(int type);

// Rank `rank`'s i-th input: a small integer in [-5, 5] (exact in every type).
inline int TestValue(int rank, size_t i) {
  return static_cast<int>(((rank + 1) * 3 + static_cast<long long>(i % 1000) * 7) % 11) - 5;
}

// Writes TestValue(rank, i) for i < n into `device` (n elements of `type`) on
// `stream`, and waits for it.
void FillDevice(int type, int rank, size_t n, void* device, cudaStream_t stream);
// Copies n elements of `type` from `device` and converts them to double.
std::vector<double> DeviceToHost(int type, const void* device, size_t n);

}  // namespace lumen::test
