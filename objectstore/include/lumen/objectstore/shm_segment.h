// ShmSegment: the node's shared-memory segment, a memfd mapped twice.
//
//   ASSIGN_OR_RETURN(std::unique_ptr<ShmSegment> seg,
//                    ShmSegment::Create("lumen-store", 1ull << 30));
//   RETURN_IF_ERROR(seg->Reserve(offset, size));   // pages exist: no SIGBUS
//   seg->PrefaultForWrite(offset, size);           // optional, best effort
//   std::memcpy(seg->writable_base() + offset, data, size);
//   const uint8_t* view = seg->readonly_base() + offset;  // hand to readers
//
//   // In a client, after receiving the fd over the store socket:
//   ASSIGN_OR_RETURN(auto seg, ShmSegment::Attach(fd, size));
//
// The segment is an anonymous memfd (MFD_CLOEXEC): nothing is ever created in
// /dev/shm, so a crashed store leaves nothing behind. It is mapped twice,
// MAP_SHARED: a read-write view (for creators) and a read-only view (for
// readers of sealed objects, so a buggy reader cannot corrupt them).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace lumen::objectstore {

// A memfd-backed memory segment mapped read-write and read-only.
// Thread-safe: the mappings are shared by threads; the only mutable state is
// which chunks are known reserved or populated (atomic flags).
class ShmSegment {
 public:
  // Creates a memfd named `name` (only visible in /proc/<pid>/fd) of `size`
  // bytes and maps it. `size` must be > 0. Pages are not reserved: call
  // Reserve for the ranges about to be written.
  static absl::StatusOr<std::unique_ptr<ShmSegment>> Create(std::string_view name,
                                                            uint64_t size);

  // Maps an existing segment whose fd was received from the store. Takes
  // ownership of `fd` in every case: it stays open for the segment's lifetime
  // (Reserve and fd() need it) and is closed by the destructor, or before
  // returning when Attach fails. Fails if the file is smaller than `size`.
  static absl::StatusOr<std::unique_ptr<ShmSegment>> Attach(int fd, uint64_t size);

  ~ShmSegment();
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;

  // Allocates the backing pages of [offset, offset + length) (fallocate), so
  // that writing them later cannot SIGBUS when memory runs out. Returns
  // ResourceExhaustedError when the memory is not there, OutOfRangeError when
  // the range is outside the segment. Pages stay reserved after the objects
  // in them are freed, so a range whose chunks (kChunk) were all reserved
  // through this object before returns at once, without a system call (a
  // fallocate of reserved pages still walks them: ~25 ms for 800 MiB).
  [[nodiscard]] absl::Status Reserve(uint64_t offset, uint64_t length) const;

  // Best effort: populates the page tables of the read-write view for the
  // range in one call (MADV_POPULATE_WRITE, Linux >= 5.14), which is much
  // faster than faulting one page at a time. Does nothing on older kernels or
  // on any error. Reserve the range first. Chunks this process populated
  // before are skipped: the store never gives pages back (no hole punching,
  // no swap for its shmem), so their page-table entries are still there and
  // walking them again costs ~15 ms per 800 MiB for nothing. Were one gone
  // after all, the write would only fault it in again.
  void PrefaultForWrite(uint64_t offset, uint64_t length) const;

  // The granularity of the reserved and populated flags.
  static constexpr uint64_t kChunk = 2ull << 20;

  uint8_t* writable_base() const { return writable_; }
  const uint8_t* readonly_base() const { return readonly_; }
  int fd() const { return fd_; }
  uint64_t size() const { return size_; }

 private:
  ShmSegment(int fd, uint64_t size, uint8_t* writable, const uint8_t* readonly);
  // Maps both views of `fd`; closes `fd` on failure.
  static absl::StatusOr<std::unique_ptr<ShmSegment>> Map(int fd, uint64_t size);

  const int fd_;
  const uint64_t size_;
  uint8_t* const writable_;
  const uint8_t* const readonly_;
  // One flag per kChunk of the segment (the last may be short): set once the
  // whole chunk was reserved (fallocate) / populated in the read-write view
  // through this object. Never cleared.
  const std::unique_ptr<std::atomic<bool>[]> reserved_;
  const std::unique_ptr<std::atomic<bool>[]> populated_;
};

}  // namespace lumen::objectstore
