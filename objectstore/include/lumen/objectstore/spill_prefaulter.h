// SpillPrefaulter: gets the page cache of a spill file being written ready
// ahead of the SpillWorker's writes, on a thread of its own, so that getting
// fresh pages for the page cache overlaps with the copy into them.
//
//   SpillPrefaulter prefaulter;
//   // fd open read-write, at least `size` long (ftruncate)
//   prefaulter.Start(fd, size);   // maps it; returns at once
//   ... write(fd, ...) the file from offset 0 ...
//   prefaulter.Finish();          // returns at once; fd may be closed any time
//
// Why: a spill grows the page cache by what it writes (the objects stay
// referenced), and every page it fills must first be given to the page
// cache. On a VM that hands freed memory back to its host (free page
// reporting) that costs a host fault per page, and one thread's write() then
// spends most of its time there (doc/objectstore.md, "Capacity, eviction and
// spilling"). The thread maps the file and faults its pages in
// (MADV_POPULATE_WRITE, Linux >= 5.14) a step at a time from the start,
// while the writer copies behind it. Populating never changes a byte already
// in the page cache (a page the writer filled first is only mapped), so the
// two need no ordering: the writer never waits for it, and where it falls
// behind the writer faults the pages in itself. Best effort: any failure
// (no MADV_POPULATE_WRITE, the disk full) stops it for that file, and the
// writer's own write reports the error.
//
// Start and Finish are called from one thread (the SpillWorker's) in turn;
// neither waits for the thread, so the writer never blocks on it.
// Thread-safe.
#pragma once

#include <cstdint>
#include <deque>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace lumen::objectstore {

class SpillPrefaulter {
 public:
  SpillPrefaulter();
  // Stops the thread after the step in progress and unmaps what it holds.
  ~SpillPrefaulter();
  SpillPrefaulter(const SpillPrefaulter&) = delete;
  SpillPrefaulter& operator=(const SpillPrefaulter&) = delete;

  // Maps [0, size) of `fd` (open read-write, at least `size` long; it may be
  // closed once this returns) and has the thread fault its pages in, from
  // the start. Ends the work on the file of the previous Start.
  void Start(int fd, uint64_t size);
  // Ends the work on the file of the last Start: the thread stops after its
  // step in progress and unmaps it. Does not wait.
  void Finish();

  // Bytes faulted in so far, over all files (for tests and measurements).
  uint64_t faulted_bytes() const;

  // Whether spills use one: LUMEN_SPILL_PREFAULT, default on; "0" turns it
  // off (for A/B measurements).
  static bool EnabledByEnv();

 private:
  struct File {
    uint8_t* map = nullptr;  // owned: unmapped by the thread (or the destructor)
    uint64_t size = 0;
    bool finished = false;   // Finish, or a later Start: no more steps
  };
  void Loop();

  mutable absl::Mutex mu_;
  std::deque<File> files_ ABSL_GUARDED_BY(mu_);  // front: the one in progress
  uint64_t faulted_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // last: starts after the state above exists
};

}  // namespace lumen::objectstore
