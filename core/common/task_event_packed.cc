#include "lumen/common/task_event_packed.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace lumen::packed_events {
namespace {

static_assert(std::endian::native == std::endian::little,
              "the packed task event records are little-endian memory images");
static_assert(TaskId::kSize == kIdSize && NodeId::kSize == kIdSize && WorkerId::kSize == kIdSize);
static_assert(kNumTaskEventKinds <= kKindMask);

// The most bytes of a record besides its name's.
constexpr size_t kMaxFixedRecord = 2 + 5 + 10 + 3 * kIdSize + 5 + 10 + 10 + 2 * 10 + 4 * 10 + 10;

template <typename T>
char* Put(char* p, T v) {
  std::memcpy(p, &v, sizeof(v));
  return p + sizeof(v);
}

template <typename T>
const char* Get(const char* p, T* v) {
  std::memcpy(v, p, sizeof(*v));
  return p + sizeof(*v);
}

char* PutVarint(char* p, uint64_t v) {
  while (v >= 0x80) {
    *p++ = static_cast<char>(v | 0x80);
    v >>= 7;
  }
  *p++ = static_cast<char>(v);
  return p;
}

uint64_t ZigZag(int64_t v) { return (static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63); }
int64_t UnZigZag(uint64_t v) { return static_cast<int64_t>(v >> 1) ^ -static_cast<int64_t>(v & 1); }
// Times and their deltas come from other processes (untrusted): added and
// subtracted modulo 2^64, never as signed overflow (undefined behaviour).
int64_t WrappingAdd(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
}
int64_t WrappingSub(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) - static_cast<uint64_t>(b));
}

// Reads a varint at `p` (before `end`); null when it is cut short or too long.
const char* GetVarint(const char* p, const char* end, uint64_t* v) {
  uint64_t result = 0;
  for (int shift = 0; shift < 64 && p < end; shift += 7) {
    const auto byte = static_cast<uint8_t>(*p++);
    result |= static_cast<uint64_t>(byte & 0x7F) << shift;
    if ((byte & 0x80) == 0) {
      *v = result;
      return p;
    }
  }
  return nullptr;
}

// The kind of the start a kWithStart record of `kind` stands for, or null.
const TaskEventKind* StartKind(TaskEventKind kind) {
  static constexpr TaskEventKind kSubmitted = TaskEventKind::kSubmitted;
  static constexpr TaskEventKind kStarted = TaskEventKind::kStarted;
  return kind == TaskEventKind::kFinished      ? &kSubmitted
         : kind == TaskEventKind::kResultStored ? &kStarted
                                                : nullptr;
}

// Whether a record of `kind` may carry the executor's events (kWithExecution).
bool HasExecution(TaskEventKind kind) {
  return kind == TaskEventKind::kFinished || kind == TaskEventKind::kFailed;
}

bool Present(const void* id) {
  if (id == nullptr) return false;
  uint64_t w[2];
  std::memcpy(w, id, sizeof(w));
  return (w[0] | w[1]) != 0;  // the nil id is all zero
}

}  // namespace

void Writer::SetSelf(int32_t pid, const NodeId& node, const WorkerId& worker) {
  self_pid_ = pid;
  self_node_ = node;
  self_worker_ = worker;
}

void Writer::BeginSegment(int32_t pid, int64_t base_time_us) {
  char buf[kSegmentHeaderSize + 2 * kIdSize];
  const bool self = pid == self_pid_;
  const bool node = self && !self_node_.IsNil();
  const bool worker = self && !self_worker_.IsNil();
  char* p = buf;
  p = Put(p, kSegmentMarker);
  p = Put(p, static_cast<uint8_t>((node ? kSegmentNode : 0) | (worker ? kSegmentWorker : 0)));
  p = Put(p, uint32_t{0});  // the length: set as records are appended
  p = Put(p, pid);
  p = Put(p, base_time_us);
  if (node) p = static_cast<char*>(std::memcpy(p, self_node_.data(), kIdSize)) + kIdSize;
  if (worker) p = static_cast<char*>(std::memcpy(p, self_worker_.data(), kIdSize)) + kIdSize;
  length_at_ = out_->size() + 2;
  out_->append(buf, static_cast<size_t>(p - buf));
  records_at_ = out_->size();
  in_segment_ = true;
  segment_pid_ = pid;
  last_time_us_ = base_time_us;
  names_.clear();
  last_name_ = 0;
}

int Writer::NameIndex(std::string_view name) {
  // The last one matched first (a loop of one function), then the newest few:
  // a miss costs a bounded scan, and a name not found is written again.
  if (last_name_ < names_.size() && names_[last_name_] == name) return static_cast<int>(last_name_);
  const size_t n = names_.size();
  for (size_t i = n; i > 0 && i + 8 > n; --i) {
    if (names_[i - 1] == name) {
      last_name_ = i - 1;
      return static_cast<int>(i - 1);
    }
  }
  last_name_ = names_.size();
  names_.push_back(name);
  return -1;
}

void Writer::Append(const Fields& f) {
  if (!in_segment_ || f.pid != segment_pid_) BeginSegment(f.pid, f.time_us);
  char buf[kMaxFixedRecord];
  const std::string_view name = f.name.substr(0, 0xFFFF);
  const bool self_ids = f.self_ids && f.pid == self_pid_;
  const bool task = f.task != nullptr && Present(f.task->data());
  const bool node = !self_ids && f.node != nullptr && Present(f.node->data());
  const bool worker = !self_ids && f.worker != nullptr && Present(f.worker->data());
  const bool extra = f.worker_pid != 0 || f.bytes != 0 || f.duration_us != 0;
  const bool folded = f.folded_us[0] != 0 || f.folded_us[1] != 0;
  const bool execution = f.execution.started_us != 0 &&
                         (f.kind == TaskEventKind::kFinished || f.kind == TaskEventKind::kFailed);
  const int name_index = name.empty() ? -1 : NameIndex(name);
  uint8_t flags = f.actor_call ? kActorCall : 0;
  if (task) flags |= kHasTask;
  if (node) flags |= kHasNode;
  if (worker) flags |= kHasWorker;
  if (extra) flags |= kHasExtra;
  if (folded) flags |= kHasFolded;
  if (!name.empty()) flags |= name_index >= 0 ? kNameRef : kNameLiteral;
  char* p = buf;
  p = Put(p,
          static_cast<uint8_t>(static_cast<uint8_t>(f.kind) | (self_ids ? kSelfIds : 0) |
                               (f.with_start ? kWithStart : 0) | (execution ? kWithExecution : 0)));
  p = Put(p, flags);
  p = PutVarint(p, f.attempt);
  p = PutVarint(p, ZigZag(WrappingSub(f.time_us, last_time_us_)));
  last_time_us_ = f.time_us;
  if (task) p = static_cast<char*>(std::memcpy(p, f.task->data(), kIdSize)) + kIdSize;
  if (node) p = static_cast<char*>(std::memcpy(p, f.node->data(), kIdSize)) + kIdSize;
  if (worker) p = static_cast<char*>(std::memcpy(p, f.worker->data(), kIdSize)) + kIdSize;
  if (extra) {
    p = PutVarint(p, ZigZag(f.worker_pid));
    p = PutVarint(p, f.bytes);
    p = PutVarint(p, ZigZag(f.duration_us));
  }
  if (folded) {
    for (int64_t t : f.folded_us) {
      p = PutVarint(p, t == 0 ? 0 : ZigZag(WrappingSub(f.time_us, t)) + 1);
    }
  }
  if (execution) {
    p = PutVarint(p, ZigZag(WrappingSub(f.time_us, f.execution.started_us)));
    p = PutVarint(p, f.execution.args_fetch_us);
    p = PutVarint(p, f.execution.run_us);
    p = PutVarint(p, f.execution.store_us);
  }
  if (name_index >= 0) {
    p = PutVarint(p, static_cast<uint64_t>(name_index));
    out_->append(buf, static_cast<size_t>(p - buf));
  } else {
    if (!name.empty()) p = PutVarint(p, name.size());
    out_->append(buf, static_cast<size_t>(p - buf));
    out_->append(name.data(), name.size());
  }
  const auto length = static_cast<uint32_t>(out_->size() - records_at_);
  std::memcpy(out_->data() + length_at_, &length, sizeof(length));
}

Fields FieldsOf(const TaskEvent& e) {
  return Fields{.kind = e.kind,
                .actor_call = e.actor_call,
                .attempt = e.attempt,
                .pid = e.pid,
                .time_us = e.time_us,
                .task = &e.task_id,
                .node = &e.node,
                .worker = &e.worker,
                .worker_pid = e.worker_pid,
                .bytes = e.bytes,
                .duration_us = e.duration_us,
                .name = e.name};
}

void Append(const Fields& f, std::string* out) {
  Writer writer(out);
  writer.Append(f);
}

void Append(const TaskEvent& e, std::string* out) { Append(FieldsOf(e), out); }

TaskEvent View::ToEvent() const {
  TaskEvent e;
  e.kind = kind;
  e.actor_call = actor_call;
  e.attempt = attempt;
  e.pid = pid;
  e.time_us = time_us;
  if (!task_id.empty()) e.task_id = TaskId::FromBinary(task_id);
  e.name.assign(name.data(), name.size());
  if (!node.empty()) e.node = NodeId::FromBinary(node);
  if (!worker.empty()) e.worker = WorkerId::FromBinary(worker);
  e.worker_pid = worker_pid;
  e.bytes = bytes;
  e.duration_us = duration_us;
  return e;
}

namespace {

absl::Status CutShort() { return absl::DataLossError("a packed task event record is cut short"); }

// What the records of one segment share.
struct Segment {
  int32_t pid = 0;
  int64_t last_time_us = 0;
  std::string_view node, worker;
  std::vector<std::string_view> names;  // ForEach's
  size_t name_count = 0;                // ForEachTally's: names.size() without them
};

// A record's fixed start, checked: kind byte, flags, attempt, time (the
// segment's clock advanced), and that its ids fit before `end`. Returns where
// the ids begin, or the error.
struct RecordHeader {
  uint8_t kind_byte = 0, flags = 0;
  uint64_t attempt = 0;
  int64_t time_us = 0;
};
absl::StatusOr<const char*> ReadHeader(const char* p, const char* end, Segment& seg,
                                       RecordHeader* h) {
  if (end - p < 2) return CutShort();
  h->kind_byte = static_cast<uint8_t>(p[0]);
  h->flags = static_cast<uint8_t>(p[1]);
  p += 2;
  const uint8_t kind = h->kind_byte & kKindMask;
  if (kind >= kNumTaskEventKinds ||
      (h->kind_byte & ~(kKindMask | kSelfIds | kWithStart | kWithExecution)) != 0 ||
      ((h->kind_byte & kWithStart) != 0 &&
       StartKind(static_cast<TaskEventKind>(kind)) == nullptr) ||
      ((h->kind_byte & kWithExecution) != 0 && !HasExecution(static_cast<TaskEventKind>(kind)))) {
    return absl::DataLossError(
        absl::StrCat("a packed task event has the unknown kind ", h->kind_byte));
  }
  uint64_t delta;
  if ((p = GetVarint(p, end, &h->attempt)) == nullptr ||
      (p = GetVarint(p, end, &delta)) == nullptr) {
    return CutShort();
  }
  const size_t ids = ((h->flags & kHasTask) ? kIdSize : 0) +
                     ((h->flags & kHasNode) ? kIdSize : 0) +
                     ((h->flags & kHasWorker) ? kIdSize : 0);
  if (static_cast<size_t>(end - p) < ids) return CutShort();
  h->time_us = seg.last_time_us = WrappingAdd(seg.last_time_us, UnZigZag(delta));
  return p;
}

// The times of the executor's events a kWithExecution record of `time_us`
// stands for (STARTED, ARGS_FETCHED, EXECUTED, RESULT_STORED).
using ExecutionTimes = std::array<int64_t, 4>;
inline constexpr std::array<TaskEventKind, 4> kExecutionKinds = {
    TaskEventKind::kStarted, TaskEventKind::kArgsFetched, TaskEventKind::kExecuted,
    TaskEventKind::kResultStored};

// Reads a kWithExecution record's times at `p` (before `end`) into `at`;
// returns their end, or null when they are cut short.
const char* ReadExecution(const char* p, const char* end, int64_t time_us, ExecutionTimes* at) {
  uint64_t started, fetch, run, store;
  if ((p = GetVarint(p, end, &started)) == nullptr || (p = GetVarint(p, end, &fetch)) == nullptr ||
      (p = GetVarint(p, end, &run)) == nullptr || (p = GetVarint(p, end, &store)) == nullptr) {
    return nullptr;
  }
  (*at)[0] = WrappingSub(time_us, UnZigZag(started));
  (*at)[1] = WrappingAdd((*at)[0], static_cast<int64_t>(fetch));
  (*at)[2] = WrappingAdd((*at)[1], static_cast<int64_t>(run));
  (*at)[3] = WrappingAdd((*at)[2], static_cast<int64_t>(store));
  return p;
}

// Reads the record at `p` (before `end`, its segment's end) into `v`, its
// folded times into `folded` and a kWithExecution record's into `execution`;
// returns its end, or the error.
absl::StatusOr<const char*> ReadRecord(const char* p, const char* end, Segment& seg, View* v,
                                       uint8_t* flags_out, std::array<int64_t, 2>* folded,
                                       ExecutionTimes* execution) {
  RecordHeader h;
  absl::StatusOr<const char*> ids = ReadHeader(p, end, seg, &h);
  if (!ids.ok()) return ids.status();
  p = *ids;
  const uint8_t kind_byte = h.kind_byte, flags = h.flags;
  v->kind = static_cast<TaskEventKind>(kind_byte & kKindMask);
  v->actor_call = (flags & kActorCall) != 0;
  v->attempt = static_cast<uint32_t>(h.attempt);
  v->pid = seg.pid;
  v->time_us = h.time_us;
  if (flags & kHasTask) v->task_id = std::string_view(p, kIdSize), p += kIdSize;
  if (kind_byte & kSelfIds) {
    v->node = seg.node;
    v->worker = seg.worker;
  }
  if (flags & kHasNode) v->node = std::string_view(p, kIdSize), p += kIdSize;
  if (flags & kHasWorker) v->worker = std::string_view(p, kIdSize), p += kIdSize;
  if (flags & kHasExtra) {
    uint64_t pid, bytes, duration;
    if ((p = GetVarint(p, end, &pid)) == nullptr || (p = GetVarint(p, end, &bytes)) == nullptr ||
        (p = GetVarint(p, end, &duration)) == nullptr) {
      return CutShort();
    }
    v->worker_pid = static_cast<int32_t>(UnZigZag(pid));
    v->bytes = bytes;
    v->duration_us = UnZigZag(duration);
  }
  if (flags & kHasFolded) {
    for (int k = 0; k < 2; ++k) {
      uint64_t t;
      if ((p = GetVarint(p, end, &t)) == nullptr) {
        return CutShort();
      }
      (*folded)[k] = t == 0 ? 0 : WrappingSub(v->time_us, UnZigZag(t - 1));
    }
  }
  if ((kind_byte & kWithExecution) &&
      (p = ReadExecution(p, end, v->time_us, execution)) == nullptr) {
    return CutShort();
  }
  if (flags & kNameRef) {
    uint64_t index;
    if ((p = GetVarint(p, end, &index)) == nullptr) {
      return CutShort();
    }
    if (index >= seg.names.size()) {
      return absl::DataLossError("a packed task event names no earlier name of its segment");
    }
    v->name = seg.names[index];
  } else if (flags & kNameLiteral) {
    uint64_t length;
    if ((p = GetVarint(p, end, &length)) == nullptr || static_cast<uint64_t>(end - p) < length) {
      return CutShort();
    }
    v->name = std::string_view(p, length);
    seg.names.push_back(v->name);
    p += length;
  }
  *flags_out = flags;
  return p;
}

// Reads the segment header at `p` (before `end`) into `seg`; returns the
// start of its records and sets `seg_end`, or the error.
absl::StatusOr<const char*> ReadSegment(const char* p, const char* end, Segment& seg,
                                        const char** seg_end) {
  if (static_cast<uint8_t>(*p) != kSegmentMarker) {
    return absl::DataLossError("a packed task event record is outside a segment");
  }
  if (static_cast<size_t>(end - p) < kSegmentHeaderSize) {
    return CutShort();
  }
  uint8_t marker, flags;
  uint32_t length;
  p = Get(p, &marker);
  p = Get(p, &flags);
  p = Get(p, &length);
  p = Get(p, &seg.pid);
  p = Get(p, &seg.last_time_us);
  const size_t ids = ((flags & kSegmentNode) ? kIdSize : 0) + ((flags & kSegmentWorker) ? kIdSize : 0);
  if (static_cast<size_t>(end - p) < ids + length) {
    return CutShort();
  }
  seg.node = seg.worker = {};
  if (flags & kSegmentNode) seg.node = std::string_view(p, kIdSize), p += kIdSize;
  if (flags & kSegmentWorker) seg.worker = std::string_view(p, kIdSize), p += kIdSize;
  seg.names.clear();
  seg.name_count = 0;
  *seg_end = p + length;
  return p;
}

}  // namespace

absl::Status ForEach(std::string_view records, absl::FunctionRef<void(const View&)> f,
                     size_t* count, size_t* record_count) {
  size_t n = 0, r = 0;
  const char* p = records.data();
  const char* end = p + records.size();
  absl::Status status;
  Segment seg;
  const char* seg_end = p;
  while (p < end) {
    if (p == seg_end) {
      absl::StatusOr<const char*> next = ReadSegment(p, end, seg, &seg_end);
      if (!next.ok()) {
        status = next.status();
        break;
      }
      p = *next;
      continue;
    }
    View v;
    uint8_t flags = 0;
    std::array<int64_t, 2> folded{};
    ExecutionTimes execution{};
    const auto kind_byte = static_cast<uint8_t>(*p);
    absl::StatusOr<const char*> next = ReadRecord(p, seg_end, seg, &v, &flags, &folded, &execution);
    if (!next.ok()) {
      status = next.status();
      break;
    }
    p = *next;
    ++r;
    // The executor's STARTED: where the task ran (the lease's node and worker
    // pid, before the folded lease takes them) and, for a whole task, its name.
    View started{.kind = TaskEventKind::kStarted,
                 .actor_call = v.actor_call,
                 .attempt = v.attempt,
                 .pid = v.worker_pid != 0 ? v.worker_pid : v.pid,
                 .task_id = v.task_id,
                 .node = v.node,
                 .worker = v.worker,
                 .name = (kind_byte & kWithStart) ? v.name : std::string_view()};
    if (kind_byte & kWithStart) {
      // The part's start first (ReadHeader checked the kind has one).
      View start{.kind = *StartKind(v.kind), .actor_call = v.actor_call, .attempt = v.attempt,
                 .pid = v.pid, .time_us = WrappingSub(v.time_us, v.duration_us),
                 .task_id = v.task_id, .name = v.name};
      if (start.kind == TaskEventKind::kStarted) {
        start.node = v.node;
        start.worker = v.worker;
        v.node = v.worker = {};
        v.duration_us = 0;
      }
      v.name = {};
      f(start);
      ++n;
    }
    std::array<TaskEventKind, 2> kinds;
    if ((flags & kHasFolded) && FoldedKinds(v.kind, &kinds)) {
      for (int k = 0; k < 2; ++k) {
        if (folded[k] == 0) continue;
        View e{.kind = kinds[k], .actor_call = v.actor_call, .attempt = v.attempt, .pid = v.pid,
               .time_us = folded[k], .task_id = v.task_id};
        if (kinds[k] == TaskEventKind::kLeaseGranted) {
          e.node = v.node;
          e.worker = v.worker;
          e.worker_pid = v.worker_pid;
        }
        f(e);
        ++n;
      }
      if (kinds[1] == TaskEventKind::kLeaseGranted) {  // those were the folded lease's
        v.node = v.worker = {};
        v.worker_pid = 0;
      }
    }
    if (kind_byte & kWithExecution) {
      for (size_t k = 0; k < kExecutionKinds.size(); ++k) {
        View e = k == 0 ? started
                        : View{.kind = kExecutionKinds[k],
                               .actor_call = v.actor_call,
                               .attempt = v.attempt,
                               .pid = started.pid,
                               .task_id = v.task_id};
        e.time_us = execution[k];
        f(e);
        ++n;
      }
    }
    f(v);
    ++n;
  }
  if (count != nullptr) *count = n;
  if (record_count != nullptr) *record_count = r;
  return status;
}

namespace {

// ReadRecord's checks, in its order and with its errors, keeping only what
// ForEachTally gives: the kind, duration and bytes, the folded events' times
// (0: none) and the flags. Returns the record's end, or the error.
absl::StatusOr<const char*> TallyRecord(const char* p, const char* end, Segment& seg,
                                        TaskEventKind* kind_out, int64_t* duration_us,
                                        uint64_t* bytes, uint8_t* flags_out,
                                        std::array<int64_t, 2>* folded) {
  RecordHeader h;
  absl::StatusOr<const char*> ids = ReadHeader(p, end, seg, &h);
  if (!ids.ok()) return ids.status();
  p = *ids;
  const uint8_t flags = h.flags;
  p += ((flags & kHasTask) ? kIdSize : 0) + ((flags & kHasNode) ? kIdSize : 0) +
       ((flags & kHasWorker) ? kIdSize : 0);  // ReadHeader checked they fit
  const int64_t time_us = h.time_us;
  *kind_out = static_cast<TaskEventKind>(h.kind_byte & kKindMask);
  *duration_us = 0;
  *bytes = 0;
  if (flags & kHasExtra) {
    uint64_t pid, b, duration;
    if ((p = GetVarint(p, end, &pid)) == nullptr || (p = GetVarint(p, end, &b)) == nullptr ||
        (p = GetVarint(p, end, &duration)) == nullptr) {
      return CutShort();
    }
    *bytes = b;
    *duration_us = UnZigZag(duration);
  }
  if (flags & kHasFolded) {
    for (int k = 0; k < 2; ++k) {
      uint64_t t;
      if ((p = GetVarint(p, end, &t)) == nullptr) {
        return CutShort();
      }
      (*folded)[k] = t == 0 ? 0 : WrappingSub(time_us, UnZigZag(t - 1));
    }
  }
  ExecutionTimes execution;
  if ((h.kind_byte & kWithExecution) &&
      (p = ReadExecution(p, end, time_us, &execution)) == nullptr) {
    return CutShort();
  }
  if (flags & kNameRef) {
    uint64_t index;
    if ((p = GetVarint(p, end, &index)) == nullptr) {
      return CutShort();
    }
    if (index >= seg.name_count) {
      return absl::DataLossError("a packed task event names no earlier name of its segment");
    }
  } else if (flags & kNameLiteral) {
    uint64_t length;
    if ((p = GetVarint(p, end, &length)) == nullptr || static_cast<uint64_t>(end - p) < length) {
      return CutShort();
    }
    ++seg.name_count;
    p += length;
  }
  *flags_out = flags;
  return p;
}

}  // namespace

namespace {

// FoldedKinds (task_events.h), written once here so the walks below inline it
// (it is a call per record else).
bool FoldedKindsOf(TaskEventKind kind, std::array<TaskEventKind, 2>* kinds) {
  switch (kind) {
    case TaskEventKind::kFinished:
    case TaskEventKind::kFailed:
      *kinds = {TaskEventKind::kDependenciesReady, TaskEventKind::kLeaseGranted};
      return true;
    case TaskEventKind::kResultStored:
      *kinds = {TaskEventKind::kArgsFetched, TaskEventKind::kExecuted};
      return true;
    default:
      return false;
  }
}

// ForEachTally's walk, calling `f(kind, duration_us, bytes)` for each event
// (inlined: CountEvents has no call per event).
template <typename F>
absl::Status TallyWalk(std::string_view records, F&& f, size_t* record_count) {
  size_t r = 0;
  const char* p = records.data();
  const char* end = p + records.size();
  absl::Status status;
  Segment seg;
  const char* seg_end = p;
  while (p < end) {
    if (p == seg_end) {
      absl::StatusOr<const char*> next = ReadSegment(p, end, seg, &seg_end);
      if (!next.ok()) {
        status = next.status();
        break;
      }
      p = *next;
      continue;
    }
    TaskEventKind kind = TaskEventKind::kSubmitted;
    int64_t duration_us = 0;
    uint64_t bytes = 0;
    uint8_t flags = 0;
    std::array<int64_t, 2> folded{};
    const auto kind_byte = static_cast<uint8_t>(*p);
    absl::StatusOr<const char*> next =
        TallyRecord(p, seg_end, seg, &kind, &duration_us, &bytes, &flags, &folded);
    if (!next.ok()) {
      status = next.status();
      break;
    }
    p = *next;
    ++r;
    if (kind_byte & kWithStart) {
      f(*StartKind(kind), int64_t{0}, uint64_t{0});
      if (kind == TaskEventKind::kResultStored) duration_us = 0;
    }
    std::array<TaskEventKind, 2> kinds;
    if ((flags & kHasFolded) && FoldedKindsOf(kind, &kinds)) {
      for (int k = 0; k < 2; ++k) {
        if (folded[k] != 0) f(kinds[k], int64_t{0}, uint64_t{0});
      }
    }
    if (kind_byte & kWithExecution) {
      for (TaskEventKind k : kExecutionKinds) f(k, int64_t{0}, uint64_t{0});
    }
    f(kind, duration_us, bytes);
  }
  if (record_count != nullptr) *record_count = r;
  return status;
}

}  // namespace

absl::Status ForEachTally(std::string_view records, TallyFn f, size_t* record_count) {
  return TallyWalk(records, f, record_count);
}

absl::Status CountEvents(std::string_view records, EventCounts* by_kind, TallyFn measured,
                         size_t* record_count) {
  return TallyWalk(
      records,
      [by_kind, &measured](TaskEventKind kind, int64_t duration_us, uint64_t bytes) {
        ++(*by_kind)[static_cast<size_t>(kind)];
        if (duration_us != 0 || bytes != 0) measured(kind, duration_us, bytes);
      },
      record_count);
}

absl::StatusOr<std::vector<TaskEvent>> Decode(std::string_view records) {
  std::vector<TaskEvent> out;
  absl::Status status = ForEach(records, [&](const View& v) { out.push_back(v.ToEvent()); });
  if (!status.ok()) return status;
  return out;
}

std::string ToBlob(std::string_view records) {
  std::string blob;
  blob.reserve(records.size() + 1);
  blob.push_back(static_cast<char>(kVersion));
  blob.append(records);
  return blob;
}

absl::StatusOr<std::string_view> RecordsOfBlob(std::string_view blob) {
  if (blob.empty()) return std::string_view();
  auto version = static_cast<uint8_t>(blob[0]);
  if (version != kVersion) {
    return absl::FailedPreconditionError(
        absl::StrCat("task events in packed version ", version, " arrived; this Lumen reads version ",
                     kVersion, " (a cluster mixing Lumen versions?)"));
  }
  return blob.substr(1);
}

}  // namespace lumen::packed_events

namespace lumen {

bool FoldedKinds(TaskEventKind kind, std::array<TaskEventKind, 2>* kinds) {
  return packed_events::FoldedKindsOf(kind, kinds);
}

}  // namespace lumen
