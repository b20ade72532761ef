#include "lumen/objectstore/shm_segment.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

namespace lumen::objectstore {
namespace {

absl::Status ErrnoError(int err, const std::string& what) {
  std::string message = absl::StrCat(what, ": ", std::strerror(err));
  switch (err) {
    case ENOMEM:
    case ENOSPC:
    case EMFILE:
    case ENFILE:
      return absl::ResourceExhaustedError(message);
    case EINVAL:
      return absl::InvalidArgumentError(message);
    case EBADF:
      return absl::FailedPreconditionError(message);
    default:
      return absl::InternalError(message);
  }
}

uint64_t PageSize() {
  static const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  return page;
}

uint64_t NumChunks(uint64_t size) { return (size + ShmSegment::kChunk - 1) / ShmSegment::kChunk; }

// Calls `fn(begin, end)` for each maximal run of [offset, end) whose chunks are
// not all flagged in `flags` (the range clipped to those chunks), and returns
// whether there was any. `size`: the segment's.
template <class Fn>
bool ForEachUnflaggedRun(const std::atomic<bool>* flags, uint64_t size, uint64_t offset,
                         uint64_t end, Fn fn) {
  constexpr uint64_t kChunk = ShmSegment::kChunk;
  bool any = false;
  uint64_t run_begin = 0;
  bool in_run = false;
  for (uint64_t c = offset / kChunk; c * kChunk < end; ++c) {
    const bool flagged = flags[c].load(std::memory_order_acquire);
    if (!flagged && !in_run) {
      run_begin = std::max(offset, c * kChunk);
      in_run = true;
    } else if (flagged && in_run) {
      fn(run_begin, c * kChunk);
      any = true;
      in_run = false;
    }
  }
  if (in_run) {
    fn(run_begin, std::min(end, size));
    any = true;
  }
  return any;
}

// Flags the chunks that [begin, end) covers whole (the segment's last chunk
// counts as whole when the range reaches the end of the segment).
void FlagCovered(std::atomic<bool>* flags, uint64_t size, uint64_t begin, uint64_t end) {
  constexpr uint64_t kChunk = ShmSegment::kChunk;
  for (uint64_t c = (begin + kChunk - 1) / kChunk; c * kChunk < end; ++c) {
    if ((c + 1) * kChunk <= end || end >= size) flags[c].store(true, std::memory_order_release);
  }
}

}  // namespace

ShmSegment::ShmSegment(int fd, uint64_t size, uint8_t* writable, const uint8_t* readonly)
    : fd_(fd),
      size_(size),
      writable_(writable),
      readonly_(readonly),
      reserved_(new std::atomic<bool>[NumChunks(size)]()),
      populated_(new std::atomic<bool>[NumChunks(size)]()) {}

absl::StatusOr<std::unique_ptr<ShmSegment>> ShmSegment::Create(std::string_view name,
                                                               uint64_t size) {
  if (size == 0) return absl::InvalidArgumentError("shared-memory segment of size 0");
  int fd = memfd_create(std::string(name).c_str(), MFD_CLOEXEC);
  if (fd < 0) return ErrnoError(errno, "memfd_create");
  if (ftruncate(fd, static_cast<off_t>(size)) != 0) {
    int err = errno;
    close(fd);
    return ErrnoError(err, absl::StrCat("ftruncate of the segment to ", size, " bytes"));
  }
  return Map(fd, size);
}

absl::StatusOr<std::unique_ptr<ShmSegment>> ShmSegment::Attach(int fd, uint64_t size) {
  if (fd < 0) return absl::InvalidArgumentError("ShmSegment::Attach: invalid fd");
  if (size == 0) {
    close(fd);
    return absl::InvalidArgumentError("shared-memory segment of size 0");
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int err = errno;
    close(fd);
    return ErrnoError(err, "fstat of the segment fd");
  }
  if (static_cast<uint64_t>(st.st_size) < size) {
    close(fd);
    return absl::InvalidArgumentError(absl::StrCat("segment fd holds ", st.st_size,
                                                   " bytes, expected at least ", size));
  }
  return Map(fd, size);
}

absl::StatusOr<std::unique_ptr<ShmSegment>> ShmSegment::Map(int fd, uint64_t size) {
  void* rw = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (rw == MAP_FAILED) {
    int err = errno;
    close(fd);
    return ErrnoError(err, "mmap of the read-write view");
  }
  void* ro = mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  if (ro == MAP_FAILED) {
    int err = errno;
    munmap(rw, size);
    close(fd);
    return ErrnoError(err, "mmap of the read-only view");
  }
  return std::unique_ptr<ShmSegment>(new ShmSegment(
      fd, size, static_cast<uint8_t*>(rw), static_cast<const uint8_t*>(ro)));
}

ShmSegment::~ShmSegment() {
  munmap(writable_, size_);
  munmap(const_cast<uint8_t*>(readonly_), size_);
  close(fd_);
}

absl::Status ShmSegment::Reserve(uint64_t offset, uint64_t length) const {
  if (offset > size_ || length > size_ - offset) {
    return absl::OutOfRangeError(absl::StrCat("reserve of [", offset, ", +", length,
                                              ") outside a segment of ", size_, " bytes"));
  }
  if (length == 0) return absl::OkStatus();
  absl::Status status;
  ForEachUnflaggedRun(reserved_.get(), size_, offset, offset + length,
                      [&](uint64_t begin, uint64_t end) {
                        if (!status.ok()) return;
                        int rc;
                        do {
                          rc = fallocate(fd_, 0, static_cast<off_t>(begin),
                                         static_cast<off_t>(end - begin));
                        } while (rc != 0 && errno == EINTR);
                        if (rc != 0) {
                          int err = errno;
                          if (err == ENOSPC || err == ENOMEM) {
                            status = absl::ResourceExhaustedError(absl::StrCat(
                                "not enough memory to back ", length,
                                " bytes of the shared-memory segment (", std::strerror(err),
                                "); the machine or the store's cgroup is out of memory"));
                          } else {
                            status = ErrnoError(err, "fallocate of the segment");
                          }
                          return;
                        }
                        FlagCovered(reserved_.get(), size_, begin, end);
                      });
  return status;
}

void ShmSegment::PrefaultForWrite(uint64_t offset, uint64_t length) const {
  if (length == 0 || offset >= size_) return;
  if (length > size_ - offset) length = size_ - offset;
  const uint64_t page = PageSize();
  ForEachUnflaggedRun(populated_.get(), size_, offset, offset + length,
                      [&](uint64_t begin, uint64_t end) {
                        const uint64_t start = begin & ~(page - 1);
                        // Failure (EINVAL on kernels < 5.14, ENOMEM, EFAULT)
                        // leaves the pages to be faulted in on first touch, as
                        // without this call. The mapping is page-granular past
                        // size_.
                        int rc;
                        do {
                          rc = madvise(writable_ + start, end - start, MADV_POPULATE_WRITE);
                        } while (rc != 0 && errno == EINTR);
                        if (rc == 0) FlagCovered(populated_.get(), size_, begin, end);
                      });
}

}  // namespace lumen::objectstore
