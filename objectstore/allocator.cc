#include "lumen/objectstore/allocator.h"

#include <algorithm>
#include <cassert>
#include <vector>

#include "absl/strings/str_cat.h"

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

absl::Status Allocator::CheckInvariants() const {
  if (free_by_offset_.size() != free_by_size_.size()) {
    return absl::InternalError(absl::StrCat(free_by_offset_.size(), " free blocks by offset but ",
                                            free_by_size_.size(), " by size"));
  }
  // Every block, free or allocated, in address order: they must tile without overlap.
  std::vector<std::pair<uint64_t, std::pair<uint64_t, bool>>> blocks;  // offset -> (size, free)
  uint64_t free_bytes = 0;
  for (const auto& [offset, size] : free_by_offset_) {
    if (!free_by_size_.contains({size, offset})) {
      return absl::InternalError(absl::StrCat("free block at ", offset, " missing by size"));
    }
    if (size == 0 || offset % alignment_ != 0 || size % alignment_ != 0) {
      return absl::InternalError(absl::StrCat("bad free block [", offset, ", +", size, ")"));
    }
    free_bytes += size;
    blocks.push_back({offset, {size, true}});
  }
  for (const auto& [offset, size] : allocated_) blocks.push_back({offset, {size, false}});
  std::sort(blocks.begin(), blocks.end());
  uint64_t end = 0;
  bool previous_free = false;
  for (const auto& [offset, block] : blocks) {
    if (offset < end) {
      return absl::InternalError(absl::StrCat("block at ", offset, " overlaps the one ending at ", end));
    }
    if (block.second && previous_free && offset == end) {
      return absl::InternalError(absl::StrCat("free blocks not coalesced at ", offset));
    }
    previous_free = block.second;
    end = offset + block.first;
  }
  if (end > capacity_) return absl::InternalError(absl::StrCat("a block ends past ", capacity_));
  if (used_ + free_bytes != capacity_) {
    return absl::InternalError(absl::StrCat("used ", used_, " + free ", free_bytes,
                                            " != capacity ", capacity_));
  }
  return absl::OkStatus();
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
