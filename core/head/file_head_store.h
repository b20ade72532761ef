// FileHeadStore: the head's state as a write-ahead log with snapshots in a
// directory (by default <session_dir>/head_state), the embedded default of
// HeadStore.
//
//   FileHeadStore store({.dir = session_dir + "/head_state"});
//   ASSIGN_OR_RETURN(HeadState state, store.Load());
//   RETURN_IF_ERROR(store.Append(record));   // snapshots by itself when the log grows
//
// Files (doc/reliability.md, "Head restart"):
//   snapshot  every live entry as one put record each (written to snapshot.tmp,
//             fsynced, renamed over snapshot, the directory fsynced)
//   wal       the records appended since that snapshot
// Both are a sequence of records: u32 body length, u32 CRC-32 of the body
// (both little endian), then the body: u8 table, u8 op (1 put, 2 delete), u32
// key length, the key, the value (the rest). Load reads the snapshot, then the
// log; a record cut short or failing its CRC at the end of the log (the head
// died while writing it) ends the replay: it is logged, and the log is cut
// back to the last whole record before new ones are appended. The same damage
// in the snapshot is DataLoss (a snapshot is renamed into place only whole).
//
// Fsync policy: each record is written with one write(2) before the head
// answers the request that made it, so it survives the head's death (kill -9)
// at once; it survives a crash of the machine once fsynced: at each snapshot,
// and after every record when `fsync_each_record` (LUMEN_HEAD_WAL_FSYNC=1).
// After `snapshot_log_bytes` of log the store snapshots its state and empties
// the log; a crash between the two replays records the snapshot already
// holds, which changes nothing (records are idempotent).
//
// Not thread-safe: owned by the head's event loop.
#pragma once

#include <cstdint>
#include <string>

#include "core/head/head_store.h"

namespace lumen::head {

class FileHeadStore : public HeadStore {
 public:
  struct Options {
    std::string dir;                           // created when absent
    uint64_t snapshot_log_bytes = 8ull << 20;  // LUMEN_HEAD_WAL_SNAPSHOT_BYTES
    bool fsync_each_record = false;            // LUMEN_HEAD_WAL_FSYNC
  };

  explicit FileHeadStore(Options options);
  ~FileHeadStore() override;
  FileHeadStore(const FileHeadStore&) = delete;
  FileHeadStore& operator=(const FileHeadStore&) = delete;

  absl::StatusOr<HeadState> Load() override;
  [[nodiscard]] absl::Status Append(const HeadRecord& record) override;
  [[nodiscard]] absl::Status Snapshot() override;
  std::string Describe() const override;

  // Bytes in the log now (for tests).
  uint64_t log_bytes() const { return log_bytes_; }
  // Snapshots taken since Load (for tests).
  uint64_t snapshots() const { return snapshots_; }

  // The record encoding (also for tests that damage a file on purpose).
  static void EncodeRecord(const HeadRecord& record, std::string* out);

 private:
  std::string Path(const char* name) const { return options_.dir + "/" + name; }

  Options options_;
  int log_fd_ = -1;
  uint64_t log_bytes_ = 0;
  uint64_t snapshots_ = 0;
  HeadState state_;  // what Load would return now: the snapshot's source
};

}  // namespace lumen::head
