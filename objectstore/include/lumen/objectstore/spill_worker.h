// SpillWorker: the store's disk I/O on a background thread, so that writing
// objects to spill files and reading them back never blocks the node's event
// loop (and the clients it serves).
//
//   SpillWorker worker([&](std::function<void()> fn) { asio::post(io, std::move(fn)); });
//   worker.Write("/spill/dir/batch-1", {{data, size}, {data2, size2}},
//                [](absl::Status s) { /* on the loop: pieces are at 0, size, ... */ });
//   worker.Read("/spill/dir/batch-1", /*file_offset=*/size, size2, dest,
//                [](absl::Status s) { /* on the loop: dest holds the bytes */ });
//
// One thread, and a SpillPrefaulter's beside it while a file is written;
// reads (restores, which a reader waits for) go before queued writes. The caller keeps the memory of a piece or a read's destination
// valid until its completion runs. Completions are handed to `post` (the
// owner's event loop); jobs still queued when the worker is destroyed are
// dropped without completion. Thread-safe.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "lumen/objectstore/spill_prefaulter.h"

namespace lumen::objectstore {

class SpillWorker {
 public:
  // Runs a completion on the owner's event loop.
  using Post = std::function<void(std::function<void()>)>;
  using Done = std::function<void(absl::Status)>;
  struct Piece {
    const uint8_t* data;
    uint64_t size;
  };

  // `prefault`: a SpillPrefaulter gets each file's page cache ready ahead
  // of its writes (see there; default SpillPrefaulter::EnabledByEnv()).
  explicit SpillWorker(Post post, bool prefault = SpillPrefaulter::EnabledByEnv());
  // Waits for the job in progress, drops the queued ones.
  ~SpillWorker();
  SpillWorker(const SpillWorker&) = delete;
  SpillWorker& operator=(const SpillWorker&) = delete;

  // Creates `path` (mode 0600, replacing a file of that name) holding the
  // pieces back to back. On failure the file is removed and `done` gets the
  // cause (ResourceExhausted when the disk is full).
  void Write(std::string path, std::vector<Piece> pieces, Done done);
  // Reads `size` bytes at `file_offset` of `path` into `dest`. Errors:
  // DataLoss when the file is shorter, the errno's otherwise.
  void Read(std::string path, uint64_t file_offset, uint64_t size, uint8_t* dest, Done done);

  // Unlinks `path`, after the queued reads and writes; no completion.
  void Remove(std::string path);

 private:
  struct Job {
    bool write = false;
    std::string path;
    std::vector<Piece> pieces;  // write
    uint64_t file_offset = 0;   // read
    uint64_t size = 0;          // read
    uint8_t* dest = nullptr;    // read
    Done done;
  };
  void Loop();
  [[nodiscard]] absl::Status DoWrite(const Job& job);
  static absl::Status DoRead(const Job& job);

  const Post post_;
  mutable absl::Mutex mu_;
  std::deque<Job> reads_ ABSL_GUARDED_BY(mu_);
  std::deque<Job> writes_ ABSL_GUARDED_BY(mu_);
  std::deque<std::string> removes_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // Used by the worker's thread only; null when prefaulting is off.
  const std::unique_ptr<SpillPrefaulter> prefaulter_;
  std::thread thread_;  // last: starts after the state above exists
};

}  // namespace lumen::objectstore
