#include "lumen/objectstore/allocator.h"

#include <cassert>

namespace lumen::objectstore {

Allocator::Allocator(uint64_t capacity, uint64_t alignment)
    : alignment_(alignment), capacity_(capacity / alignment * alignment) {
  assert(alignment != 0 && (alignment & (alignment - 1)) == 0);
  if (capacity_ > 0) InsertFree(0, capacity_);
}

std::optional<uint64_t> Allocator::Allocate(uint64_t size) {
  if (size > capacity_) return std::nullopt;  // Also guards the rounding below.
  uint64_t rounded = size == 0 ? alignment_ : (size + alignment_ - 1) & ~(alignment_ - 1);
  auto fit = free_by_size_.lower_bound({rounded, 0});
  if (fit == free_by_size_.end()) return std::nullopt;
  const uint64_t offset = fit->second;
  const uint64_t block = fit->first;
  EraseFree(free_by_offset_.find(offset));
  if (block > rounded) InsertFree(offset + rounded, block - rounded);
  allocated_.emplace(offset, rounded);
  used_ += rounded;
  return offset;
}

void Allocator::Free(uint64_t offset) {
  auto alloc = allocated_.find(offset);
  if (alloc == allocated_.end()) {
    assert(false && "Allocator::Free of an offset that is not allocated");
    return;
  }
  uint64_t start = offset;
  uint64_t size = alloc->second;
  used_ -= size;
  allocated_.erase(alloc);

  // Coalesce with the following free block, then the preceding one.
  auto next = free_by_offset_.lower_bound(start);
  if (next != free_by_offset_.end() && next->first == start + size) {
    size += next->second;
    next = std::next(next);
    EraseFree(std::prev(next));
  }
  if (next != free_by_offset_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == start) {
      start = prev->first;
      size += prev->second;
      EraseFree(prev);
    }
  }
  InsertFree(start, size);
}

uint64_t Allocator::largest_free_block() const {
  return free_by_size_.empty() ? 0 : free_by_size_.rbegin()->first;
}

uint64_t Allocator::AllocationSize(uint64_t offset) const {
  auto it = allocated_.find(offset);
  return it == allocated_.end() ? 0 : it->second;
}

void Allocator::InsertFree(uint64_t offset, uint64_t size) {
  free_by_offset_.emplace(offset, size);
  free_by_size_.emplace(size, offset);
}

void Allocator::EraseFree(std::map<uint64_t, uint64_t>::iterator it) {
  free_by_size_.erase({it->second, it->first});
  free_by_offset_.erase(it);
}

}  // namespace lumen::objectstore
