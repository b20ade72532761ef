// RotatingLogFile: an append-only file that holds at most about `max_bytes`:
// a write that would take it past that first renames it to PATH.1 (replacing
// the previous PATH.1) and starts PATH afresh, so a worker's output costs at
// most 2 x max_bytes of disk however long it runs.
//
//   RotatingLogFile file("/tmp/lumen-session-x/logs/worker-123.out", 64 << 20);
//   absl::Status s = file.Write("hello\n");
//
// Not thread-safe (one owner: the node daemon's io thread). Writes are plain
// blocking write(2) calls to a local file, as the daemon's own log does.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace lumen::node {

class RotatingLogFile {
 public:
  // The file is created (mode 0600) on the first write.
  RotatingLogFile(std::string path, uint64_t max_bytes);
  ~RotatingLogFile();
  RotatingLogFile(const RotatingLogFile&) = delete;
  RotatingLogFile& operator=(const RotatingLogFile&) = delete;

  // Appends `data` (rotating first when it would not fit). Errors: the open,
  // rename or write failing (e.g. disk full); the data is then lost.
  [[nodiscard]] absl::Status Write(std::string_view data);
  const std::string& path() const { return path_; }
  // Bytes in the current file.
  uint64_t size() const { return size_; }
  int rotations() const { return rotations_; }

 private:
  [[nodiscard]] absl::Status Open();

  const std::string path_;
  const uint64_t max_bytes_;
  int fd_ = -1;
  uint64_t size_ = 0;
  int rotations_ = 0;
};

// LUMEN_LOG_MAX_BYTES, or 64 MiB: where a worker's log file rotates.
uint64_t WorkerLogMaxBytes();

}  // namespace lumen::node
