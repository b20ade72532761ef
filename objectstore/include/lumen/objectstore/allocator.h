// Allocator: hands out aligned offsets inside a fixed range [0, capacity).
//
//   lumen::objectstore::Allocator alloc(/*capacity=*/1 << 30);
//   std::optional<uint64_t> offset = alloc.Allocate(4096);
//   if (!offset) { /* store full */ }
//   alloc.Free(*offset);
//
// The store's memory segment is carved up with it; it knows nothing about the
// memory itself, only offsets. Policy: best fit, lowest offset on ties, carving
// from the low end of the chosen block, so recently freed low addresses (whose
// pages are already faulted in) are reused first. Free blocks are coalesced
// with their neighbours on Free. Every operation is O(log n) in the number of
// free blocks.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"

namespace lumen::objectstore {

// Best-fit range allocator. Not thread-safe (owned by the store's event loop).
class Allocator {
 public:
  // `alignment` must be a power of two. `capacity` is rounded down to a
  // multiple of `alignment`; capacity() returns the rounded value.
  explicit Allocator(uint64_t capacity, uint64_t alignment = 64);

  Allocator(const Allocator&) = delete;
  Allocator& operator=(const Allocator&) = delete;

  // Returns the offset of a block of at least `size` bytes (rounded up to the
  // alignment; a size of 0 takes one alignment unit), or nullopt when no free
  // block fits. The offset is a multiple of the alignment.
  std::optional<uint64_t> Allocate(uint64_t size);

  // Returns a block obtained from Allocate. Freeing an offset that is not
  // allocated is a programmer error: it asserts in debug builds and is ignored
  // in release builds.
  void Free(uint64_t offset);

  uint64_t capacity() const { return capacity_; }
  uint64_t alignment() const { return alignment_; }
  // Bytes in live allocations (after rounding up to the alignment).
  uint64_t used() const { return used_; }
  // Size of the largest free block: the largest Allocate that would succeed.
  uint64_t largest_free_block() const;
  uint64_t num_allocations() const { return allocated_.size(); }
  // The rounded size of the live allocation at `offset`, or 0 if none.
  uint64_t AllocationSize(uint64_t offset) const;

  // For property tests: OK when the free lists agree with each other, free
  // blocks are aligned, disjoint and coalesced (no two touch), no allocation
  // overlaps a free block or another allocation, and used() plus the free
  // bytes is the capacity; else Internal naming the first violation. O(n log n).
  [[nodiscard]] absl::Status CheckInvariants() const;

 private:
  void InsertFree(uint64_t offset, uint64_t size);
  void EraseFree(std::map<uint64_t, uint64_t>::iterator it);

  const uint64_t alignment_;
  const uint64_t capacity_;
  uint64_t used_ = 0;
  // Free blocks by offset (offset -> size), for coalescing.
  std::map<uint64_t, uint64_t> free_by_offset_;
  // The same free blocks by (size, offset), for best fit.
  std::set<std::pair<uint64_t, uint64_t>> free_by_size_;
  // Live allocations: offset -> rounded size.
  absl::flat_hash_map<uint64_t, uint64_t> allocated_;
};

}  // namespace lumen::objectstore
