// SegmentReserver: reserves every page of the store's segment (fallocate) on a
// background thread, so that the node starts at once and its whole capacity
// is backed by memory a few seconds later (about 1 GiB/s here: a 7 GiB store,
// 30% of a 24 GiB machine, takes ~6 s; done inline that would delay the
// node's start by as much).
//
//   SegmentReserver reserver(segment.get(), {});   // starts reserving
//   ...                                            // creates still Reserve their own range
//   if (reserver.done() && !reserver.status().ok()) { /* reserved per object from here */ }
//
// It never pushes the machine into the OOM killer: before each chunk it checks
// the memory still available and stops (ResourceExhausted, logged once) when
// less than the chunk plus `keep_free` is left; the pages not reserved then
// are reserved per object at create (ObjectTable::Create), which fails with
// ResourceExhausted (ObjectStoreFullError) instead of SIGBUS.
//
// Its thread runs under SCHED_IDLE (niceness kNiceness where that is refused),
// so the seconds of CPU the reservation costs go to it only when no other
// thread wants the core. Chunks are small (4 MiB, a few ms) because a create
// whose range is not reserved yet waits for the inode lock the chunk holds.
//
// Thread-safe: the accessors may be called from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "lumen/objectstore/shm_segment.h"

namespace lumen::objectstore {

class SegmentReserver {
 public:
  // The reserving thread's niceness (setpriority on its thread id).
  static constexpr int kNiceness = 19;

  struct Options {
    uint64_t chunk = 4ull << 20;   // bytes per fallocate call (the inode lock is held that long)
    // Bytes of memory the machine can still give (0: unknown, do not check).
    // Default: MemAvailable from /proc/meminfo.
    std::function<uint64_t()> available_memory;
    uint64_t keep_free = 64ull << 20;  // stop while this much would remain
  };

  // Starts reserving [0, segment->size()). `segment` is borrowed and must
  // outlive this object.
  SegmentReserver(const ShmSegment* segment, Options options);
  // Stops between two chunks and joins the thread.
  ~SegmentReserver();
  SegmentReserver(const SegmentReserver&) = delete;
  SegmentReserver& operator=(const SegmentReserver&) = delete;

  // Bytes reserved so far, from offset 0.
  uint64_t reserved_bytes() const { return reserved_.load(std::memory_order_acquire); }
  // True once the thread has finished (all reserved, stopped, or failed).
  bool done() const { return done_.load(std::memory_order_acquire); }
  // Why the reservation stopped short; OK while running or when complete.
  absl::Status status() const;

 private:
  void Run();

  const ShmSegment* const segment_;
  const Options options_;
  std::atomic<uint64_t> reserved_{0};
  std::atomic<bool> done_{false};
  std::atomic<bool> stop_{false};
  mutable absl::Mutex mu_;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;  // last: started once the members above exist
};

// MemAvailable of this machine, limited by the memory limit of this process's
// cgroup (v2 memory.max, or v1 memory.limit_in_bytes, minus what the cgroup
// uses), in bytes; 0 when unknown.
uint64_t AvailableMemoryBytes();

// True when the cgroup's limit, not the machine's memory, is what
// AvailableMemoryBytes is bounded by (a container's --memory).
bool MemoryLimitedByCgroup();

}  // namespace lumen::objectstore
