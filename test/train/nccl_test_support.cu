#include "nccl_test_support.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <stdexcept>
#include <string>

namespace lumen::test {
namespace {

void Check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

template <class T>
__device__ __host__ T FromInt(int v) { return static_cast<T>(v); }
template <>
__device__ __host__ __half FromInt<__half>(int v) { return __float2half(static_cast<float>(v)); }
template <>
__device__ __host__ __nv_bfloat16 FromInt<__nv_bfloat16>(int v) {
  return __float2bfloat16(static_cast<float>(v));
}

template <class T>
double ToDouble(T v) { return static_cast<double>(v); }
template <>
double ToDouble<__half>(__half v) { return static_cast<double>(__half2float(v)); }
template <>
double ToDouble<__nv_bfloat16>(__nv_bfloat16 v) { return static_cast<double>(__bfloat162float(v)); }

template <class T>
__global__ void Fill(T* out, size_t n, int rank) {
  size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i < n) {
    int v = static_cast<int>(((rank + 1) * 3 + static_cast<long long>(i % 1000) * 7) % 11) - 5;
    out[i] = FromInt<T>(v);
  }
}

template <class T>
void FillTyped(int rank, size_t n, void* device, cudaStream_t stream) {
  if (n == 0) return;
  unsigned threads = 256;
  unsigned blocks = static_cast<unsigned>((n + threads - 1) / threads);
  Fill<T><<<blocks, threads, 0, stream>>>(static_cast<T*>(device), n, rank);
  Check(cudaGetLastError(), "Fill kernel");
  Check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
}

template <class T>
std::vector<double> ReadTyped(const void* device, size_t n) {
  std::vector<T> host(n);
  if (n > 0) Check(cudaMemcpy(host.data(), device, n * sizeof(T), cudaMemcpyDeviceToHost), "cudaMemcpy");
  std::vector<double> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = ToDouble<T>(host[i]);
  return out;
}

}  // namespace

size_t NcclTestTypeSize(int type) {
  static const size_t kSizes[] = {4, 8, 4, 8, 2, 2};
  return kSizes[type];
}

void FillDevice(int type, int rank, size_t n, void* device, cudaStream_t stream) {
  switch (type) {
    case kF32: return FillTyped<float>(rank, n, device, stream);
    case kF64: return FillTyped<double>(rank, n, device, stream);
    case kI32: return FillTyped<int32_t>(rank, n, device, stream);
    case kI64: return FillTyped<int64_t>(rank, n, device, stream);
    case kF16: return FillTyped<__half>(rank, n, device, stream);
    default: return FillTyped<__nv_bfloat16>(rank, n, device, stream);
  }
}

std::vector<double> DeviceToHost(int type, const void* device, size_t n) {
  switch (type) {
    case kF32: return ReadTyped<float>(device, n);
    case kF64: return ReadTyped<double>(device, n);
    case kI32: return ReadTyped<int32_t>(device, n);
    case kI64: return ReadTyped<int64_t>(device, n);
    case kF16: return ReadTyped<__half>(device, n);
    default: return ReadTyped<__nv_bfloat16>(device, n);
  }
}

}  // namespace lumen::test
