#include "lumen/common/stream_copy.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace lumen {

#if defined(__x86_64__)
namespace {

// The streaming loops: `d` is 64-byte aligned; each copies whole blocks with
// unaligned loads and non-temporal stores (each cache line written once and
// not read: no read-for-ownership), fences, and returns the bytes copied.
// AVX2's 32-byte stores: on the 2-vCPU Zen 3 VM an 800 MiB copy into a store
// mapping ran at 16.9-17.1 GB/s against 14.3-14.5 with SSE2's 16-byte ones,
// and glibc's memcpy at matching page offsets 16.8-17.5.
__attribute__((target("avx2"))) size_t StreamCopyAvx2(uint8_t* d, const uint8_t* s, size_t n) {
  size_t i = 0;
  for (; i + 128 <= n; i += 128) {
    __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i));
    __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i + 32));
    __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i + 64));
    __m256i e = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i + 96));
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + i), a);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + i + 32), b);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + i + 64), c);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + i + 96), e);
  }
  // Non-temporal stores are weakly ordered: make them visible before
  // anything this thread does next (the seal that publishes the object).
  _mm_sfence();
  return i;
}

size_t StreamCopySse2(uint8_t* d, const uint8_t* s, size_t n) {
  size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
    __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 16));
    __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 32));
    __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 48), e);
  }
  _mm_sfence();
  return i;
}

bool HasAvx2() {
  static const bool has = __builtin_cpu_supports("avx2");
  return has;
}

}  // namespace
#endif

bool StreamCopyPays() {
#if defined(__x86_64__)
  static const bool pays = __builtin_cpu_is("amd");
  return pays;
#else
  return false;
#endif
}

void StreamCopyBytes(void* dst, const void* src, size_t n) {
#if defined(__x86_64__)
  auto* d = static_cast<uint8_t*>(dst);
  const auto* s = static_cast<const uint8_t*>(src);
  // Up to the destination's next 64-byte boundary with memcpy, whole blocks
  // streamed, the tail with memcpy.
  size_t head = std::min(n, (64 - reinterpret_cast<uintptr_t>(d) % 64) % 64);
  std::memcpy(d, s, head);
  size_t done = head + (HasAvx2() ? StreamCopyAvx2 : StreamCopySse2)(d + head, s + head, n - head);
  std::memcpy(d + done, s + done, n - done);
#else
  std::memcpy(dst, src, n);
#endif
}

void CopyBytes(void* dst, const void* src, size_t n) {
  if (n >= kStreamCopyBytes && StreamCopyPays()) {
    StreamCopyBytes(dst, src, n);
    return;
  }
  std::memcpy(dst, src, n);
}

}  // namespace lumen
