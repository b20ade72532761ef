// An object's value on the wire: a failure to and from its proto, and the
// proto value (inline bytes, a stored copy's location, or the error) of an
// entry of the object table, as owners send it to readers (objectStatus) and
// in task arguments; and the Status a read of a failed object returns.
// Internal to core/worker; pure functions, any thread.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/worker/object_table.h"
#include "lumen/common/error_kind.h"
#include "lumen/common/failure_types.h"
#include "lumen/common/proto_util.h"

namespace lumen::runtime {

inline Failure FailureFromProto(proto::TaskFailure::Reader f) {
  return Failure{f.getKind(), f.getExceptionType().cStr(), f.getMessage().cStr(),
                 f.getLocation().cStr(), f.getCancelled()};
}

inline void FailureToProto(const Failure& failure, proto::TaskFailure::Builder out) {
  out.setKind(failure.kind);
  out.setExceptionType(failure.exception_type);
  out.setMessage(failure.message);
  out.setLocation(failure.location);
  out.setCancelled(failure.cancelled);
}

// The Status a Get of an object that failed with `f` returns: its kind names
// the exception the API throws (api_error.h, ThrowStatus), its message is
// the exception's text.
inline absl::Status FailureStatus(const Failure& f) {
  if (f.cancelled) return ErrorStatus(ErrorKind::kTaskCancelled, f.message);
  switch (f.kind) {
    case proto::FailureKind::TASK_ERROR:
    case proto::FailureKind::FUNCTION_NOT_FOUND:
      return TaskErrorStatus(
          absl::StrCat(f.exception_type.empty() ? "" : f.exception_type + ": ", f.message,
                       f.location.empty() ? "" : " (in " + f.location + ")"),
          {f.exception_type, f.message, f.location});
    case proto::FailureKind::WORKER_CRASHED:
      return ErrorStatus(f.exception_type == kOutOfMemoryErrorType ? ErrorKind::kOutOfMemory
                                                                   : ErrorKind::kWorkerCrashed,
                         f.message);
    case proto::FailureKind::OBJECT_LOST:
      return ErrorStatus(
          f.exception_type == kOwnerDiedErrorType ? ErrorKind::kOwnerDied : ErrorKind::kObjectLost,
          f.message);
    case proto::FailureKind::ACTOR_DIED:
      return ErrorStatus(ErrorKind::kActorDied, f.message);
    case proto::FailureKind::STORE_FULL:
      return ErrorStatus(ErrorKind::kObjectStoreFull, f.message);
    case proto::FailureKind::TYPE_MISMATCH:
      return ErrorStatus(ErrorKind::kTypeMismatch, f.message);
    default:
      return ErrorStatus(ErrorKind::kError, f.message);
  }
}

// `entry`'s value; a stored object's owner is `self_address` when we own it.
// The caller holds the table's lock.
inline void FillValue(proto::Value::Builder out, const ObjectEntry& entry,
                      const std::string& self_address) {
  switch (entry.kind) {
    case ObjectEntry::Kind::kInline:
      out.setInline(BytesOf(*entry.value));
      break;
    case ObjectEntry::Kind::kStored: {
      auto stored = out.initStored();
      stored.setSize(entry.stored_size);
      if (!entry.locations.empty()) {
        stored.setNodeId(DataOf(entry.locations.front().first));
        stored.setNodeAddress(entry.locations.front().second);
      }
      stored.setOwnerAddress(entry.owned ? self_address : entry.owner_address);
      break;
    }
    case ObjectEntry::Kind::kFailed:
      FailureToProto(*entry.failure, out.initError());
      break;
  }
}

}  // namespace lumen::runtime
