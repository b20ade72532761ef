// CopyBytes: std::memcpy for the large copies into the object store, at the
// memory's speed whatever the two pointers' alignments.
//
//   lumen::CopyBytes(store_base + offset, array.data(), bytes);
//
// glibc's memcpy (2.36, AMD EPYC Zen 3 here) copies 800 MiB at 8-10 GB/s
// when the destination's offset within its page equals the source's, or is
// 16 bytes before it or 2 KiB after it, but at 2.1-3.6 GB/s when it is 48 or
// 112 bytes after it (bench/copy_alignment). A Put of a std::vector is that
// case: the vector's data starts 16 bytes into a page (malloc's header), its
// array in the store 64 or 128 bytes into one (objects 64-byte aligned, the
// array after a 64-byte header), so an 800 MiB put ran at a quarter of
// memcpy_gigabytes (two vectors, both 16 bytes into a page).
// StreamCopyBytes copies with non-temporal stores to a 64-byte aligned
// destination: 32-byte loads and stores where the CPU has AVX2 (at glibc's
// best-case speed for any alignment: 16.9-17.1 against 16.8-17.5 GB/s idle on
// that Zen 3), else 16-byte ones (SSE2, every x86-64; ~0.83 of it); the
// destination is not left in the cache. CopyBytes streams n >= kStreamCopyBytes
// only where that pays: on AMD CPUs. On the Intel Xeon VM of stop 33 glibc's
// memcpy copied 800 MiB at 8.7-9.6 GB/s at every offset and streaming at
// 5.9-6.1 (a large Put ran at 0.60-0.67 of memcpy_gigabytes), so elsewhere
// CopyBytes is std::memcpy, as is every copy off x86-64 and every smaller
// one. Thread-safe; the ranges must not overlap.
#pragma once

#include <cstddef>

namespace lumen {

// From this size on CopyBytes streams (below it memcpy is as fast or faster:
// source and destination may still be in the cache).
inline constexpr size_t kStreamCopyBytes = size_t{16} << 20;

void CopyBytes(void* dst, const void* src, size_t n);

// The streaming copy whatever the CPU and size (std::memcpy off x86-64): for
// tests and bench/copy_alignment.
void StreamCopyBytes(void* dst, const void* src, size_t n);

// Whether CopyBytes streams its large copies on this CPU.
bool StreamCopyPays();

}  // namespace lumen
