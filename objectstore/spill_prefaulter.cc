#include "lumen/objectstore/spill_prefaulter.h"

#include <errno.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

namespace lumen::objectstore {
namespace {

// Faulted in per madvise call: small enough that Finish waits little for the
// call in progress, large enough that the calls cost nothing next to it.
constexpr uint64_t kStep = 4ull << 20;

}  // namespace

SpillPrefaulter::SpillPrefaulter() : thread_([this] { Loop(); }) {}

SpillPrefaulter::~SpillPrefaulter() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
  absl::MutexLock lock(&mu_);
  for (const File& f : files_) ::munmap(f.map, f.size);
}

bool SpillPrefaulter::EnabledByEnv() {
  const char* v = std::getenv("LUMEN_SPILL_PREFAULT");
  return v == nullptr || std::strcmp(v, "0") != 0;
}

void SpillPrefaulter::Start(int fd, uint64_t size) {
  void* map = size == 0 ? MAP_FAILED
                        : ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  absl::MutexLock lock(&mu_);
  for (File& f : files_) f.finished = true;
  if (map != MAP_FAILED) files_.push_back(File{static_cast<uint8_t*>(map), size});
}

void SpillPrefaulter::Finish() {
  absl::MutexLock lock(&mu_);
  for (File& f : files_) f.finished = true;
}

uint64_t SpillPrefaulter::faulted_bytes() const {
  absl::MutexLock lock(&mu_);
  return faulted_;
}

void SpillPrefaulter::Loop() {
  absl::MutexLock lock(&mu_);
  for (;;) {
    mu_.Await(absl::Condition(
        +[](SpillPrefaulter* p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(p->mu_) {
          return p->stopping_ || !p->files_.empty();
        },
        this));
    if (stopping_) return;
    const File file = files_.front();
    uint64_t done = 0;
    while (!stopping_ && !files_.front().finished && done < file.size) {
      const uint64_t step = std::min(kStep, file.size - done);
      mu_.Unlock();
      const int rc = ::madvise(file.map + done, step, MADV_POPULATE_WRITE);
      const int err = errno;
      mu_.Lock();
      if (rc == 0) {
        done += step;
        faulted_ += step;
      } else if (err != EINTR) {
        break;  // unsupported, or the disk is full: the writer will tell
      }
    }
    if (stopping_) return;  // the destructor unmaps it
    files_.pop_front();
    mu_.Unlock();
    ::munmap(file.map, file.size);
    mu_.Lock();
  }
}

}  // namespace lumen::objectstore
