#include "core/node/rotating_log_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace lumen::node {

RotatingLogFile::RotatingLogFile(std::string path, uint64_t max_bytes)
    : path_(std::move(path)), max_bytes_(max_bytes > 0 ? max_bytes : 1) {}

RotatingLogFile::~RotatingLogFile() {
  if (fd_ >= 0) ::close(fd_);
}

absl::Status RotatingLogFile::Open() {
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd_ < 0) {
    return absl::InternalError(absl::StrCat("cannot open ", path_, ": ", std::strerror(errno)));
  }
  struct stat st{};
  size_ = ::fstat(fd_, &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
  return absl::OkStatus();
}

absl::Status RotatingLogFile::Write(std::string_view data) {
  if (fd_ < 0) {
    if (auto s = Open(); !s.ok()) return s;
  }
  if (size_ > 0 && size_ + data.size() > max_bytes_) {
    ::close(fd_);
    fd_ = -1;
    std::string old = path_ + ".1";
    if (::rename(path_.c_str(), old.c_str()) != 0) {
      return absl::InternalError(absl::StrCat("cannot rotate ", path_, ": ", std::strerror(errno)));
    }
    ++rotations_;
    if (auto s = Open(); !s.ok()) return s;
  }
  while (!data.empty()) {
    ssize_t n = ::write(fd_, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return absl::InternalError(absl::StrCat("cannot write ", path_, ": ", std::strerror(errno)));
    }
    size_ += static_cast<uint64_t>(n);
    data.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

uint64_t WorkerLogMaxBytes() {
  const char* v = std::getenv("LUMEN_LOG_MAX_BYTES");
  uint64_t parsed = 0;
  return v != nullptr && absl::SimpleAtoi(v, &parsed) && parsed > 0 ? parsed : uint64_t{64} << 20;
}

}  // namespace lumen::node
