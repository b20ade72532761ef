// Error kinds in absl::Status payloads (error_kind.h).
#include "lumen/common/error_kind.h"

#include <optional>

#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace lumen {
namespace {

absl::StatusCode CodeOf(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kTaskCancelled:
      return absl::StatusCode::kCancelled;
    case ErrorKind::kWorkerCrashed:
    case ErrorKind::kCollective:
      return absl::StatusCode::kAborted;
    case ErrorKind::kOutOfMemory:
    case ErrorKind::kObjectStoreFull:
      return absl::StatusCode::kResourceExhausted;
    case ErrorKind::kObjectLost:
    case ErrorKind::kOwnerDied:
      return absl::StatusCode::kDataLoss;
    case ErrorKind::kActorDied:
      return absl::StatusCode::kUnavailable;
    case ErrorKind::kTypeMismatch:
      return absl::StatusCode::kInvalidArgument;
    case ErrorKind::kGetTimeout:
      return absl::StatusCode::kDeadlineExceeded;
    case ErrorKind::kPlacementGroup:
    case ErrorKind::kKv:
      return absl::StatusCode::kFailedPrecondition;
    case ErrorKind::kError:
    case ErrorKind::kTask:
      break;
  }
  return absl::StatusCode::kUnknown;
}

// The task parts as "<size>:<bytes>" three times.
void AppendField(std::string& out, absl::string_view field) {
  absl::StrAppend(&out, field.size(), ":", field);
}

std::optional<std::string> TakeField(absl::string_view& in) {
  const size_t colon = in.find(':');
  size_t size = 0;
  if (colon == absl::string_view::npos || !absl::SimpleAtoi(in.substr(0, colon), &size) ||
      in.size() - colon - 1 < size) {
    return std::nullopt;
  }
  std::string field(in.substr(colon + 1, size));
  in.remove_prefix(colon + 1 + size);
  return field;
}

}  // namespace

const char* ErrorKindName(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kError:
      return "Error";
    case ErrorKind::kTask:
      return "TaskError";
    case ErrorKind::kTaskCancelled:
      return "TaskCancelledError";
    case ErrorKind::kWorkerCrashed:
      return "WorkerCrashedError";
    case ErrorKind::kOutOfMemory:
      return "OutOfMemoryError";
    case ErrorKind::kObjectLost:
      return "ObjectLostError";
    case ErrorKind::kOwnerDied:
      return "OwnerDiedError";
    case ErrorKind::kActorDied:
      return "ActorDiedError";
    case ErrorKind::kObjectStoreFull:
      return "ObjectStoreFullError";
    case ErrorKind::kTypeMismatch:
      return "TypeMismatchError";
    case ErrorKind::kGetTimeout:
      return "GetTimeoutError";
    case ErrorKind::kPlacementGroup:
      return "PlacementGroupError";
    case ErrorKind::kKv:
      return "KvError";
    case ErrorKind::kCollective:
      return "CollectiveError";
  }
  return "Error";
}

absl::Status ErrorStatus(ErrorKind kind, absl::string_view message) {
  absl::Status status(CodeOf(kind), message);
  status.SetPayload(kErrorKindPayload, absl::Cord(ErrorKindName(kind)));
  return status;
}

ErrorKind ErrorKindOf(const absl::Status& status) {
  auto payload = status.GetPayload(kErrorKindPayload);
  if (!payload) return ErrorKind::kError;
  const std::string name(*payload);
  for (int i = 0; i < kNumErrorKinds; ++i) {
    const auto kind = static_cast<ErrorKind>(i);
    if (name == ErrorKindName(kind)) return kind;
  }
  return ErrorKind::kError;
}

absl::Status TaskErrorStatus(absl::string_view message, const TaskErrorParts& parts) {
  absl::Status status = ErrorStatus(ErrorKind::kTask, message);
  std::string fields;
  AppendField(fields, parts.exception_type);
  AppendField(fields, parts.task_message);
  AppendField(fields, parts.location);
  status.SetPayload(kTaskErrorPayload, absl::Cord(std::move(fields)));
  return status;
}

TaskErrorParts TaskErrorPartsOf(const absl::Status& status) {
  auto payload = status.GetPayload(kTaskErrorPayload);
  if (!payload) return {};
  const std::string fields(*payload);
  absl::string_view in(fields);
  auto type = TakeField(in);
  auto message = TakeField(in);
  auto location = TakeField(in);
  if (!type || !message || !location) return {};
  return TaskErrorParts{std::move(*type), std::move(*message), std::move(*location)};
}

}  // namespace lumen
