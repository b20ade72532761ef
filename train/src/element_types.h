// Element types of lumen::collective on the host (Gloo): sizes, names, and the
// reductions of Gloo's math for each type. Header-only, stateless.
#pragma once

#include <cstddef>
#include <cstdint>

#include <gloo/allreduce.h>
#include <gloo/math.h>

#include "lumen/train/collective.h"

namespace lumen::collective::internal {

inline size_t ElementSize(DType t) {
  switch (t) {
    case DType::kFloat32: return 4;
    case DType::kFloat64: return 8;
    case DType::kInt32: return 4;
    case DType::kInt64: return 8;
    case DType::kFloat16: return 2;
    case DType::kBFloat16: return 2;
  }
  return 0;
}

inline const char* DTypeName(DType t) {
  switch (t) {
    case DType::kFloat32: return "float32";
    case DType::kFloat64: return "float64";
    case DType::kInt32: return "int32";
    case DType::kInt64: return "int64";
    case DType::kFloat16: return "float16";
    case DType::kBFloat16: return "bfloat16";
  }
  return "?";
}

// Whether the Gloo backend handles `t` (the 16-bit types are NCCL's only).
inline bool HostType(DType t) {
  return t == DType::kFloat32 || t == DType::kFloat64 || t == DType::kInt32 ||
         t == DType::kInt64;
}

// Calls f(T{}) with T the C++ type of a host element type (HostType(t)).
template <class F>
decltype(auto) DispatchHost(DType t, F&& f) {
  switch (t) {
    case DType::kFloat64: return f(double{});
    case DType::kInt32: return f(int32_t{});
    case DType::kInt64: return f(int64_t{});
    default: return f(float{});
  }
}

// c[i] = a[i] (op) b[i]; c may be a. kAverage reduces as kSum (DivideBy after).
template <class T>
gloo::AllreduceOptions::Func ReduceFunc(ReduceOp op) {
  switch (op) {
    case ReduceOp::kProduct:
      return [](void* c, const void* a, const void* b, size_t n) { gloo::product<T>(c, a, b, n); };
    case ReduceOp::kMin:
      return [](void* c, const void* a, const void* b, size_t n) { gloo::min<T>(c, a, b, n); };
    case ReduceOp::kMax:
      return [](void* c, const void* a, const void* b, size_t n) { gloo::max<T>(c, a, b, n); };
    case ReduceOp::kSum:
    case ReduceOp::kAverage:
      break;
  }
  return [](void* c, const void* a, const void* b, size_t n) { gloo::sum<T>(c, a, b, n); };
}

template <class T>
void DivideBy(void* data, size_t n, int world) {
  T* p = static_cast<T*>(data);
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<T>(p[i] / static_cast<T>(world));
}

}  // namespace lumen::collective::internal
