#include "lumen/objectstore/spill_prefaulter.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

namespace lumen::objectstore {
namespace {

// Brought in per call: small enough that Finish waits little for the call in
// progress, large enough that the calls cost little next to it. readahead(2)
// does at most the file's readahead window per call (128 KiB by default,
// read_ahead_kb; a longer call returns 0 having done only that), so it goes
// 128 KiB at a time: ~8,000 calls for 1 GiB, ~1% of the time it takes.
constexpr uint64_t kMapStep = 4ull << 20;
constexpr uint64_t kReadaheadStep = 128ull << 10;

}  // namespace

SpillPrefaulter::SpillPrefaulter(Method method) : method_(method), thread_([this] { Loop(); }) {}

SpillPrefaulter::~SpillPrefaulter() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
  absl::MutexLock lock(&mu_);
  for (const File& f : files_) Release(f);
}

void SpillPrefaulter::Release(const File& f) {
  if (f.map != nullptr) ::munmap(f.map, f.size);
  if (f.fd >= 0) ::close(f.fd);
}

SpillPrefaulter::Method SpillPrefaulter::MethodFromEnv() {
  const char* v = std::getenv("LUMEN_SPILL_PREFAULT");
  return v != nullptr && std::strcmp(v, "readahead") == 0 ? Method::kReadahead : Method::kMap;
}

bool SpillPrefaulter::EnabledByEnv() {
  const char* v = std::getenv("LUMEN_SPILL_PREFAULT");
  return v == nullptr || std::strcmp(v, "0") != 0;
}

void SpillPrefaulter::Start(int fd, uint64_t size) {
  // Only a dup of the fd here: a mapping (kMap) is made on the thread, so
  // that the writer never waits for the process's mmap lock, which the
  // thread's MADV_POPULATE_WRITE holds while it faults.
  const int own = size == 0 ? -1 : ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
  absl::MutexLock lock(&mu_);
  for (File& f : files_) f.finished = true;
  if (own >= 0) files_.push_back(File{.fd = own, .size = size});
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
    if (method_ == Method::kMap && files_.front().map == nullptr) {
      const File f = files_.front();
      mu_.Unlock();
      void* map = ::mmap(nullptr, f.size, PROT_READ | PROT_WRITE, MAP_SHARED, f.fd, 0);
      mu_.Lock();
      files_.front().map = map == MAP_FAILED ? nullptr : static_cast<uint8_t*>(map);
      if (map == MAP_FAILED) files_.front().finished = true;  // nothing to fault through
    }
    const File file = files_.front();
    const uint64_t max_step = method_ == Method::kMap ? kMapStep : kReadaheadStep;
    uint64_t done = 0;
    while (!stopping_ && !files_.front().finished && done < file.size) {
      const uint64_t step = std::min(max_step, file.size - done);
      mu_.Unlock();
      const int rc = method_ == Method::kMap
                         ? ::madvise(file.map + done, step, MADV_POPULATE_WRITE)
                         : ::readahead(file.fd, static_cast<off64_t>(done), step);
      const int err = errno;
      mu_.Lock();
      if (rc == 0) {
        done += step;
        faulted_ += step;
      } else if (err != EINTR) {
        break;  // unsupported, or the disk is full: the writer will tell
      }
    }
    if (stopping_) return;  // the destructor releases it
    files_.pop_front();
    mu_.Unlock();
    Release(file);
    mu_.Lock();
  }
}

}  // namespace lumen::objectstore
