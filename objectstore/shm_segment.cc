#include "lumen/objectstore/shm_segment.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

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

}  // namespace

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
  int rc;
  do {
    rc = fallocate(fd_, 0, static_cast<off_t>(offset), static_cast<off_t>(length));
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    int err = errno;
    if (err == ENOSPC || err == ENOMEM) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "not enough memory to back ", length, " bytes of the shared-memory segment (",
          std::strerror(err), "); the machine or the store's cgroup is out of memory"));
    }
    return ErrnoError(err, "fallocate of the segment");
  }
  return absl::OkStatus();
}

void ShmSegment::PrefaultForWrite(uint64_t offset, uint64_t length) const {
  if (length == 0 || offset >= size_) return;
  if (length > size_ - offset) length = size_ - offset;
  const uint64_t page = PageSize();
  const uint64_t start = offset & ~(page - 1);
  const uint64_t end = offset + length;  // The mapping is page-granular past size_.
  // Failure (EINVAL on kernels < 5.14, ENOMEM, EFAULT) leaves the pages to be
  // faulted in on first touch, as without this call.
  int rc;
  do {
    rc = madvise(writable_ + start, end - start, MADV_POPULATE_WRITE);
  } while (rc != 0 && errno == EINTR);
}

}  // namespace lumen::objectstore
