// CopyBytes: std::memcpy for the large copies into the object store, at the
// memory's speed whatever the two pointers' alignments.
//
//   lumen::CopyBytes(store_base + offset, array.data(), bytes);
//
// glibc's memcpy (2.36, AMD Zen 3 here) copies a buffer larger than its
// non-temporal threshold (about 100 MiB on this machine) at ~6-14 GB/s when
// source and destination share their offset within a page, but at only
// ~2-3.5 GB/s when they do not: a Put of a std::vector (its data at 16 bytes
// into a page) into the store (arrays 64-byte aligned in the object) is the
// second case, so an 800 MiB put ran at a quarter of memcpy_gigabytes.
// CopyBytes copies n >= kStreamCopyBytes with 16-byte loads and non-temporal
// stores to a 64-byte aligned destination (SSE2, every x86-64), which runs at
// the speed of glibc's best case for any alignment; smaller copies, and every
// copy off x86-64, are std::memcpy. The destination is not left in the cache
// (it is larger than a cache slice anyway). Thread-safe; the ranges must not
// overlap.
#pragma once

#include <cstddef>

namespace lumen {

// From this size on CopyBytes streams (below it memcpy is as fast or faster:
// source and destination may still be in the cache).
inline constexpr size_t kStreamCopyBytes = size_t{16} << 20;

void CopyBytes(void* dst, const void* src, size_t n);

}  // namespace lumen
