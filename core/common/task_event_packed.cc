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

bool Present(const void* id) {
  if (id == nullptr) return false;
  uint64_t w[2];
  std::memcpy(w, id, sizeof(w));
  return (w[0] | w[1]) != 0;  // the nil id is all zero
}

}  // namespace

void Append(const Fields& f, std::string* out) {
  char buf[kMaxFixedSize];
  const size_t name_len = std::min<size_t>(f.name.size(), 0xFFFF);
  uint8_t flags = f.actor_call ? kActorCall : 0;
  const bool task = f.task != nullptr && Present(f.task->data());
  const bool node = f.node != nullptr && Present(f.node->data());
  const bool worker = f.worker != nullptr && Present(f.worker->data());
  const bool extra = f.worker_pid != 0 || f.bytes != 0 || f.duration_us != 0;
  const bool folded = f.folded_us[0] != 0 || f.folded_us[1] != 0;
  if (folded) flags |= kHasFolded;
  if (task) flags |= kHasTask;
  if (node) flags |= kHasNode;
  if (worker) flags |= kHasWorker;
  if (extra) flags |= kHasExtra;
  char* p = buf;
  p = Put(p, static_cast<uint8_t>(f.kind));
  p = Put(p, flags);
  p = Put(p, static_cast<uint16_t>(name_len));
  p = Put(p, f.attempt);
  p = Put(p, f.pid);
  p = Put(p, f.time_us);
  if (task) p = static_cast<char*>(std::memcpy(p, f.task->data(), kIdSize)) + kIdSize;
  if (node) p = static_cast<char*>(std::memcpy(p, f.node->data(), kIdSize)) + kIdSize;
  if (worker) p = static_cast<char*>(std::memcpy(p, f.worker->data(), kIdSize)) + kIdSize;
  if (extra) {
    p = Put(p, f.worker_pid);
    p = Put(p, f.bytes);
    p = Put(p, f.duration_us);
  }
  if (folded) {
    p = Put(p, f.folded_us[0]);
    p = Put(p, f.folded_us[1]);
  }
  out->append(buf, static_cast<size_t>(p - buf));
  out->append(f.name.data(), name_len);
}

void Append(const TaskEvent& e, std::string* out) {
  Append(Fields{.kind = e.kind,
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
                .name = e.name},
         out);
}

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

// Reads the record at `p` (before `end`) into `v` and its folded times into
// `folded`; returns its end, or null with `status` set.
const char* ReadRecord(const char* p, const char* end, View* v, uint8_t* flags_out,
                       std::array<int64_t, 2>* folded, absl::Status* status) {
  if (static_cast<size_t>(end - p) < kHeaderSize) {
    *status = absl::DataLossError("a packed task event record is cut short");
    return nullptr;
  }
  uint8_t kind, flags;
  uint16_t name_len;
  p = Get(p, &kind);
  p = Get(p, &flags);
  p = Get(p, &name_len);
  p = Get(p, &v->attempt);
  p = Get(p, &v->pid);
  p = Get(p, &v->time_us);
  size_t rest = name_len + ((flags & kHasTask) ? kIdSize : 0) + ((flags & kHasNode) ? kIdSize : 0) +
                ((flags & kHasWorker) ? kIdSize : 0) + ((flags & kHasExtra) ? kExtraSize : 0) +
                ((flags & kHasFolded) ? kFoldedSize : 0);
  if (kind >= kNumTaskEventKinds) {
    *status = absl::DataLossError(absl::StrCat("a packed task event has the unknown kind ", kind));
    return nullptr;
  }
  if (static_cast<size_t>(end - p) < rest) {
    *status = absl::DataLossError("a packed task event record is cut short");
    return nullptr;
  }
  v->kind = static_cast<TaskEventKind>(kind);
  v->actor_call = (flags & kActorCall) != 0;
  if (flags & kHasTask) v->task_id = std::string_view(p, kIdSize), p += kIdSize;
  if (flags & kHasNode) v->node = std::string_view(p, kIdSize), p += kIdSize;
  if (flags & kHasWorker) v->worker = std::string_view(p, kIdSize), p += kIdSize;
  if (flags & kHasExtra) {
    p = Get(p, &v->worker_pid);
    p = Get(p, &v->bytes);
    p = Get(p, &v->duration_us);
  }
  if (flags & kHasFolded) {
    p = Get(p, &(*folded)[0]);
    p = Get(p, &(*folded)[1]);
  }
  v->name = std::string_view(p, name_len);
  *flags_out = flags;
  return p + name_len;
}

}  // namespace

absl::Status ForEach(std::string_view records, absl::FunctionRef<void(const View&)> f,
                     size_t* count, size_t* record_count) {
  size_t n = 0, r = 0;
  const char* p = records.data();
  const char* end = p + records.size();
  absl::Status status;
  while (p < end) {
    View v;
    uint8_t flags = 0;
    std::array<int64_t, 2> folded{};
    p = ReadRecord(p, end, &v, &flags, &folded, &status);
    if (p == nullptr) break;
    ++r;
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
    f(v);
    ++n;
  }
  if (count != nullptr) *count = n;
  if (record_count != nullptr) *record_count = r;
  return status;
}

size_t PrefixBytes(std::string_view records, size_t n) {
  const char* p = records.data();
  const char* end = p + records.size();
  for (size_t seen = 0; seen < n && p < end; ++seen) {
    View v;
    uint8_t flags = 0;
    std::array<int64_t, 2> folded{};
    absl::Status status;
    const char* next = ReadRecord(p, end, &v, &flags, &folded, &status);
    if (next == nullptr) break;
    p = next;
  }
  return static_cast<size_t>(p - records.data());
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
