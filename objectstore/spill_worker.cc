#include "lumen/objectstore/spill_worker.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif

#include "absl/strings/str_cat.h"

namespace lumen::objectstore {
namespace {

absl::Status FileError(int err, const std::string& what, const std::string& path) {
  std::string message = absl::StrCat(what, " ", path, ": ", std::strerror(err));
  if (err == ENOSPC || err == EDQUOT) return absl::ResourceExhaustedError(message);
  return absl::InternalError(message);
}

// Maps the piece's pages into this process in one call (MADV_POPULATE_READ,
// Linux >= 5.14) before write() reads them: the store's process never touched
// them (its clients wrote them), and faulting them in one page at a time made
// spilling several times slower than the disk. Best effort.
void PopulateForRead(const SpillWorker::Piece& piece) {
  if (piece.data == nullptr || piece.size == 0) return;
  static const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  uintptr_t start = reinterpret_cast<uintptr_t>(piece.data) & ~(page - 1);
  uintptr_t end = reinterpret_cast<uintptr_t>(piece.data) + piece.size;
  while (::madvise(reinterpret_cast<void*>(start), end - start, MADV_POPULATE_READ) != 0 &&
         errno == EINTR) {
  }
}

}  // namespace

SpillWorker::SpillWorker(Post post, bool prefault)
    : post_(std::move(post)),
      prefaulter_(prefault ? std::make_unique<SpillPrefaulter>() : nullptr),
      thread_([this] { Loop(); }) {}

SpillWorker::~SpillWorker() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
}

void SpillWorker::Write(std::string path, std::vector<Piece> pieces, Done done) {
  absl::MutexLock lock(&mu_);
  writes_.push_back(Job{.write = true, .path = std::move(path), .pieces = std::move(pieces),
                        .done = std::move(done)});
}

void SpillWorker::Read(std::string path, uint64_t file_offset, uint64_t size, uint8_t* dest,
                       Done done) {
  absl::MutexLock lock(&mu_);
  reads_.push_back(Job{.write = false, .path = std::move(path), .file_offset = file_offset,
                       .size = size, .dest = dest, .done = std::move(done)});
}

void SpillWorker::Remove(std::string path) {
  absl::MutexLock lock(&mu_);
  removes_.push_back(std::move(path));
}

void SpillWorker::Loop() {
  for (;;) {
    Job job;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](SpillWorker* w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(w->mu_) {
            return w->stopping_ || !w->reads_.empty() || !w->writes_.empty() ||
                   !w->removes_.empty();
          },
          this));
      if (stopping_) return;
      if (reads_.empty() && writes_.empty()) {
        std::string path = std::move(removes_.front());
        removes_.pop_front();
        mu_.Unlock();
        ::unlink(path.c_str());
        mu_.Lock();
        continue;
      }
      std::deque<Job>& queue = reads_.empty() ? writes_ : reads_;
      job = std::move(queue.front());
      queue.pop_front();
    }
    absl::Status status = job.write ? DoWrite(job) : DoRead(job);
    post_([done = std::move(job.done), status = std::move(status)] { done(status); });
  }
}

absl::Status SpillWorker::DoWrite(const Job& job) {
  // Read-write: the prefaulter may map it (LUMEN_SPILL_PREFAULT=map).
  int fd = ::open(job.path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return FileError(errno, "cannot create spill file", job.path);
  absl::Status status;
  uint64_t total = 0;
  for (const Piece& piece : job.pieces) total += piece.size;
  // The file gets its final size first, so that the prefaulter can bring in all
  // of it; the writes below fill it from the start, behind the prefaulter.
  const bool prefault = prefaulter_ != nullptr && total > 0 &&
                        ::ftruncate(fd, static_cast<off_t>(total)) == 0;
  if (prefault) prefaulter_->Start(fd, total);
  for (const Piece& piece : job.pieces) {
    PopulateForRead(piece);
    uint64_t done = 0;
    while (done < piece.size && status.ok()) {
      ssize_t n = ::write(fd, piece.data + done, piece.size - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        status = FileError(n < 0 ? errno : ENOSPC, "cannot write spill file", job.path);
        break;
      }
      done += static_cast<uint64_t>(n);
    }
    if (!status.ok()) break;
  }
  if (prefault) prefaulter_->Finish();
  if (::close(fd) != 0 && status.ok()) status = FileError(errno, "cannot close spill file", job.path);
  if (!status.ok()) ::unlink(job.path.c_str());
  return status;
}

absl::Status SpillWorker::DoRead(const Job& job) {
  int fd = ::open(job.path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return FileError(errno, "cannot open spill file", job.path);
  uint64_t done = 0;
  absl::Status status;
  while (done < job.size) {
    ssize_t n = ::pread(fd, job.dest + done, job.size - done,
                        static_cast<off_t>(job.file_offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      status = FileError(errno, "cannot read spill file", job.path);
      break;
    }
    if (n == 0) {
      status = absl::DataLossError(absl::StrCat("spill file ", job.path, " ends at ",
                                                job.file_offset + done, ", expected ",
                                                job.file_offset + job.size, " bytes"));
      break;
    }
    done += static_cast<uint64_t>(n);
  }
  ::close(fd);
  return status;
}

}  // namespace lumen::objectstore
