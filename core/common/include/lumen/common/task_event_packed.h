// The packed form of task events: compact binary records, back to back, that a
// process's flush sends to its node daemon as one blob and the node keeps as it
// came (no decoding per event), until `lumen timeline` decodes them.
//
//   std::string records;
//   packed_events::Writer writer(&records);                     // or the recorder's DrainPacked
//   writer.Append(fields); ...
//   packed_events::ForEach(records, [](const packed_events::View& v) { ... });
//   absl::StatusOr<std::vector<TaskEvent>> back = packed_events::Decode(records);
//
// Records come in segments, each led by a header naming what its records
// share (the recording process), so that a record carries only what is its
// own (~20-45 bytes where version 2 took ~50-90):
//
//   segment: u8 0xFF | u8 segment flags | u32 length (bytes of its records,
//            after this header) | i32 pid | i64 base time_us
//            [16 node id]  flags & kSegmentNode     the recording process's node
//            [16 worker id] flags & kSegmentWorker  and worker (a worker's own)
//   record:  u8 kind (low 5 bits; 0x20: kSelfIds, the node and worker are the
//            segment's; 0x40: kWithStart, 0x80: kWithExecution, below)
//            | u8 flags | varint attempt
//            | zigzag varint time_us - the previous record's (the first: the base's)
//            [16 task id]                      flags & kHasTask
//            [16 node id]                      flags & kHasNode
//            [16 worker id]                    flags & kHasWorker
//            [zigzag worker_pid | varint bytes | zigzag duration_us]   flags & kHasExtra
//            [varint, varint: 0 none, else zigzag(time_us - folded time) + 1]
//                                              flags & kHasFolded
//            [zigzag time_us - started_us, varint args fetch us, varint run us,
//             varint store us]                 kind & kWithExecution
//            [varint length, bytes]            flags & kNameLiteral (added to
//                                              the segment's name table)
//            [varint index]                    flags & kNameRef (a name of that table)
//
// Little-endian, unaligned. A segment is whole in itself (names refer only
// to earlier names of their segment), so blobs of records can be joined end to
// end (the node answers `lumen timeline` so) but not cut between segments.
//
// kHasFolded: the record also stands for the events folded into it
// (FoldedKinds: DEPENDENCIES_READY and LEASE_GRANTED into FINISHED/FAILED,
// ARGS_FETCHED and EXECUTED into RESULT_STORED). ForEach gives them as events
// of their own, before the record's: same task, attempt, pid and actor flag; a
// folded LEASE_GRANTED takes the record's node, worker and worker_pid (the
// record's own event then has none).
//
// kWithStart (FINISHED and RESULT_STORED only): the record also stands for
// the start of its part, SUBMITTED or STARTED, the first of its events: at
// time_us - duration_us (kHasExtra's; 0 when absent), with the record's name,
// and for STARTED the segment's node and worker (kSelfIds). The record's own
// event then has no name, and RESULT_STORED's no node, worker or duration
// (as when recorded apart). So one record per task and process is the
// common case (task_events.h).
//
// kWithExecution (FINISHED and FAILED only): the record also stands for the
// executor's STARTED, ARGS_FETCHED, EXECUTED and RESULT_STORED (TaskExecution,
// from the worker's reply), given after the folded events, in the process
// worker_pid (kHasExtra's) on the record's node, with the worker's id if the
// record has one; STARTED takes the record's name (the start's, when
// kWithStart). The folded LEASE_GRANTED, when there is one, still takes the node
// and worker_pid; the record's own event then has neither.
//
// On the wire the blob starts with kVersion (TaskEventBatch.packed); a reader
// refuses another version with an error naming both. Pure functions,
// thread-safe; a Writer is one caller's.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lumen/common/task_events.h"

namespace lumen::packed_events {

// The version byte that leads a packed blob on the wire (5: kWithExecution;
// 4: kWithStart; 3:
// segments, varints and name tables; 2 had a fixed header per record). Blobs
// live in the daemons' memory only, never across versions: readers read this
// one alone.
inline constexpr uint8_t kVersion = 5;

enum Flags : uint8_t {
  kActorCall = 1 << 0,
  kHasTask = 1 << 1,
  kHasNode = 1 << 2,
  kHasWorker = 1 << 3,
  kHasExtra = 1 << 4,
  kHasFolded = 1 << 5,
  kNameLiteral = 1 << 6,
  kNameRef = 1 << 7,
};
// In a record's kind byte.
inline constexpr uint8_t kKindMask = 0x1F;
inline constexpr uint8_t kSelfIds = 0x20;
inline constexpr uint8_t kWithStart = 0x40;
inline constexpr uint8_t kWithExecution = 0x80;
// A segment header's first byte, and its flags.
inline constexpr uint8_t kSegmentMarker = 0xFF;
enum SegmentFlags : uint8_t {
  kSegmentNode = 1 << 0,
  kSegmentWorker = 1 << 1,
};
inline constexpr size_t kSegmentHeaderSize = 18;  // without its ids
inline constexpr size_t kIdSize = 16;

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
  // The node and worker are the recording process's (the segment's: not
  // written per record); `node` and `worker` are then ignored.
  bool self_ids = false;
  int32_t worker_pid = 0;            // the three: written when any is non-zero
  uint64_t bytes = 0;
  int64_t duration_us = 0;
  // FINISHED/FAILED, RESULT_STORED: the times of the events folded into this
  // one (FoldedKinds), 0 for none; written when either is set.
  std::array<int64_t, 2> folded_us{};
  // FINISHED, RESULT_STORED: the record also stands for its part's start
  // (kWithStart), at time_us - duration_us, named `name`.
  bool with_start = false;
  // FINISHED/FAILED: the executor's events (kWithExecution), in the process
  // worker_pid; written when started_us is set.
  TaskExecution execution;
  std::string_view name;             // at most 65,535 bytes (longer is cut)
};

// Writes records to `out` (appending to what it holds), in segments: one per
// process, a new one whenever the pid changes. The names given must stay valid
// while the Writer is used (a repeated name is written once per segment).
class Writer {
 public:
  explicit Writer(std::string* out) : out_(out) {}
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;

  // The process whose records carry self_ids: its segments name its node and
  // worker (nil: not written).
  void SetSelf(int32_t pid, const NodeId& node, const WorkerId& worker);
  void Append(const Fields& fields);

 private:
  void BeginSegment(int32_t pid, int64_t base_time_us);
  // The index of `name` in this segment's table, or -1 (then it is added).
  int NameIndex(std::string_view name);

  std::string* out_;
  bool in_segment_ = false;
  size_t length_at_ = 0;       // the segment's length field in *out_
  size_t records_at_ = 0;      // where its records start in *out_
  int32_t segment_pid_ = 0;
  int64_t last_time_us_ = 0;
  int32_t self_pid_ = 0;
  NodeId self_node_;
  WorkerId self_worker_;
  std::vector<std::string_view> names_;  // this segment's, by index
  size_t last_name_ = 0;                 // index of the last name matched or added
};

// Appends one record to `out`, in a segment of its own.
void Append(const Fields& fields, std::string* out);
void Append(const TaskEvent& event, std::string* out);
// A TaskEvent's fields (borrowing its ids and name).
Fields FieldsOf(const TaskEvent& event);

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
// record's folded events, then its own. A record cut short, of an unknown
// kind or outside a segment stops the walk with an error (the records before
// it were given to `f`); `count` (when not null) gets how many events,
// `record_count` how many records.
[[nodiscard]] absl::Status ForEach(std::string_view records, absl::FunctionRef<void(const View&)> f,
                     size_t* count = nullptr, size_t* record_count = nullptr);

// The node daemon's walk for its totals: calls `f` with each event's kind,
// and its duration and bytes (as View's; 0 for folded events), in ForEach's
// order, with the same checks (a blob one refuses the other refuses at the
// same record), but without building a View per event or keeping the
// segment's names. `record_count` (when not null) gets how many records.
using TallyFn = absl::FunctionRef<void(TaskEventKind kind, int64_t duration_us, uint64_t bytes)>;
[[nodiscard]] absl::Status ForEachTally(std::string_view records, TallyFn f, size_t* record_count = nullptr);

// Leaner still, for the node daemon's totals: adds each event of `records`
// to `by_kind` (ForEachTally's events, in its order, with its checks: an
// error stops the walk, the events before it counted) and calls `measured`
// only for the events with a duration or bytes (as ForEachTally gives them:
// a task's latency on FINISHED/FAILED, PULL's bytes...), about one per task
// rather than ~4: no call per event.
using EventCounts = std::array<uint64_t, kNumTaskEventKinds>;
[[nodiscard]] absl::Status CountEvents(std::string_view records, EventCounts* by_kind,
                                       TallyFn measured, size_t* record_count = nullptr);

absl::StatusOr<std::vector<TaskEvent>> Decode(std::string_view records);

// A wire blob: the version byte then `records`.
std::string ToBlob(std::string_view records);
// The records of a wire blob; an error for an unknown version.
absl::StatusOr<std::string_view> RecordsOfBlob(std::string_view blob);

}  // namespace lumen::packed_events
