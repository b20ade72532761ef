// The packed form of task events: compact binary records, back to back, that a
// process's flush sends to its node daemon as one blob and the node keeps as it
// came (no decoding per event), until `lumen timeline` decodes them.
//
//   std::string records;
//   packed_events::Append(event, &records);                     // or the recorder's DrainPacked
//   packed_events::ForEach(records, [](const packed_events::View& v) { ... });
//   absl::StatusOr<std::vector<TaskEvent>> back = packed_events::Decode(records);
//
// A record (little-endian, unaligned; ~40 bytes for most events against ~100
// for the Cap'n Proto list it replaces):
//
//   u8 kind | u8 flags | u16 name length | u32 attempt | i32 pid | i64 time_us
//   [16 task id]                      flags & kHasTask
//   [16 node id]                      flags & kHasNode
//   [16 worker id]                    flags & kHasWorker
//   [i32 worker_pid | u64 bytes | i64 duration_us]   flags & kHasExtra
//   [i64 time_us, i64 time_us]        flags & kHasFolded
//   [name bytes]
//
// kHasFolded (version 2): the record also stands for the events folded into
// it (FoldedKinds: DEPENDENCIES_READY and LEASE_GRANTED into FINISHED/FAILED,
// ARGS_FETCHED and EXECUTED into RESULT_STORED), with their times (0: that one
// did not happen). ForEach gives them as events of their own, before the
// record's: same task, attempt, pid and actor flag; a folded LEASE_GRANTED
// takes the record's node, worker and worker_pid (the record's own event then
// has none).
//
// On the wire the blob starts with kVersion (TaskEventBatch.packed); a reader
// refuses another version with an error naming both. Pure functions,
// thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lumen/common/task_events.h"

namespace lumen::packed_events {

// The version byte that leads a packed blob on the wire.
inline constexpr uint8_t kVersion = 2;

enum Flags : uint8_t {
  kActorCall = 1 << 0,
  kHasTask = 1 << 1,
  kHasNode = 1 << 2,
  kHasWorker = 1 << 3,
  kHasExtra = 1 << 4,
  kHasFolded = 1 << 5,
};

inline constexpr size_t kHeaderSize = 20;
inline constexpr size_t kIdSize = 16;
inline constexpr size_t kExtraSize = 20;
inline constexpr size_t kFoldedSize = 16;
// The largest record without its name.
inline constexpr size_t kMaxFixedSize = kHeaderSize + 3 * kIdSize + kExtraSize + kFoldedSize;

// One record's fields, as Append writes them: ids and the name by pointer
// (borrowed for the call).
struct Fields {
  TaskEventKind kind = TaskEventKind::kSubmitted;
  bool actor_call = false;
  uint32_t attempt = 0;
  int32_t pid = 0;
  int64_t time_us = 0;
  const TaskId* task = nullptr;      // null or nil: not written
  const NodeId* node = nullptr;
  const WorkerId* worker = nullptr;
  int32_t worker_pid = 0;            // the three: written when any is non-zero
  uint64_t bytes = 0;
  int64_t duration_us = 0;
  // FINISHED/FAILED, RESULT_STORED: the times of the events folded into this
  // one (FoldedKinds), 0 for none; written when either is set.
  std::array<int64_t, 2> folded_us{};
  std::string_view name;             // at most 65,535 bytes (longer is cut)
};

// Appends one record to `out`.
void Append(const Fields& fields, std::string* out);
void Append(const TaskEvent& event, std::string* out);

// One record as read: the ids as raw bytes (empty when absent), the name a
// view into the records. Valid while the records are.
struct View {
  TaskEventKind kind = TaskEventKind::kSubmitted;
  bool actor_call = false;
  uint32_t attempt = 0;
  int32_t pid = 0;
  int64_t time_us = 0;
  std::string_view task_id, node, worker;
  int32_t worker_pid = 0;
  uint64_t bytes = 0;
  int64_t duration_us = 0;
  std::string_view name;

  TaskEvent ToEvent() const;
};

// Calls `f` for each event of `records` (no version byte), in order: a
// record's folded events, then its own. A record cut short or of an unknown
// kind stops the walk with an error (the records before it were given to
// `f`); `count` (when not null) gets how many events, `record_count` how many
// records.
absl::Status ForEach(std::string_view records, absl::FunctionRef<void(const View&)> f,
                     size_t* count = nullptr, size_t* record_count = nullptr);
// The size in bytes of the first `n` records of `records` (all if fewer).
size_t PrefixBytes(std::string_view records, size_t n);

absl::StatusOr<std::vector<TaskEvent>> Decode(std::string_view records);

// A wire blob: the version byte then `records`.
std::string ToBlob(std::string_view records);
// The records of a wire blob; an error for an unknown version.
absl::StatusOr<std::string_view> RecordsOfBlob(std::string_view blob);

}  // namespace lumen::packed_events
