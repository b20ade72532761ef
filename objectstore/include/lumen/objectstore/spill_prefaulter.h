// SpillPrefaulter: gets the page cache of a spill file being written ready
// ahead of the SpillWorker's writes, on a thread of its own, so that getting
// fresh pages for the page cache overlaps with the copy into them.
//
//   SpillPrefaulter prefaulter;
//   // fd open read-write, at least `size` long (ftruncate)
//   prefaulter.Start(fd, size);   // dups the fd; returns at once
//   ... write(fd, ...) the file from offset 0 ...
//   prefaulter.Finish();          // returns at once; fd may be closed any time
//
// Why: a spill grows the page cache by what it writes (the objects stay
// referenced), and every page it fills must first be given to the page
// cache. On a VM that hands freed memory back to its host (free page
// reporting) that costs a host fault per page, and one thread's write() then
// spends most of its time there (doc/objectstore.md, "Capacity, eviction and
// spilling"). The thread brings the file's pages into the page cache a step
// at a time from the start, while the writer copies behind it (by default
// mapping the file and MADV_POPULATE_WRITE; see Method). Bringing a page in
// never changes a byte already in the page cache (a page the writer filled
// first is only mapped or skipped), so the two need no ordering: the writer never
// waits for it, and where it falls behind the writer gets the pages itself.
// Best effort: any failure stops it for that file, and the writer's own
// write reports errors.
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
  // How the page cache is brought in: kMap (default), a shared mapping of
  // the file (made on the thread) and MADV_POPULATE_WRITE (Linux >= 5.14;
  // also dirties the pages and sets up and tears down page tables, under the
  // process's mmap lock); kReadahead, readahead(2) of the file (the file
  // system gives each hole a zeroed page-cache page, no disk read, nothing
  // mapped). Not yet shown faster: doc/benchmark.md (stop 29).
  enum class Method { kReadahead, kMap };
  explicit SpillPrefaulter(Method method = MethodFromEnv());
  // Stops the thread after the step in progress and lets go of what it holds.
  ~SpillPrefaulter();
  SpillPrefaulter(const SpillPrefaulter&) = delete;
  SpillPrefaulter& operator=(const SpillPrefaulter&) = delete;

  // Has the thread bring [0, size) of `fd` (open read-write, at least `size`
  // long; a dup is kept, so it may be closed once this returns) into the
  // page cache, from the start. Ends the work on the file of the previous
  // Start.
  void Start(int fd, uint64_t size);
  // Ends the work on the file of the last Start: the thread stops after its
  // step in progress and lets it go. Does not wait.
  void Finish();

  // Bytes brought in so far, over all files (for tests and measurements).
  uint64_t faulted_bytes() const;

  // Whether spills use one: LUMEN_SPILL_PREFAULT, default on; "0" turns it
  // off (for A/B measurements).
  static bool EnabledByEnv();
  // LUMEN_SPILL_PREFAULT=readahead: kReadahead (for A/B measurements);
  // else kMap.
  static Method MethodFromEnv();

 private:
  struct File {
    int fd = -1;             // owned (a dup): closed by the thread (or the destructor)
    uint64_t size = 0;
    uint8_t* map = nullptr;  // kMap: owned, mapped and unmapped by the thread
    bool finished = false;   // Finish, or a later Start: no more steps
  };
  void Loop();
  static void Release(const File& f);

  const Method method_;
  mutable absl::Mutex mu_;
  std::deque<File> files_ ABSL_GUARDED_BY(mu_);  // front: the one in progress
  uint64_t faulted_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // last: starts after the state above exists
};

}  // namespace lumen::objectstore
