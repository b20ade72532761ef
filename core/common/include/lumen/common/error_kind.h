// Lumen's error kinds, carried inside an absl::Status: the runtime returns
// Status/StatusOr everywhere below the user API, and a failure that the API
// must throw as a typed exception (lumen/errors.h) says which one by its kind.
//
//   return ErrorStatus(ErrorKind::kObjectLost, "object ab12 is lost: ...");
//   ...
//   if (ErrorKindOf(status) == ErrorKind::kGetTimeout) ...
//
// The kind rides in a Status payload (kErrorKindPayload), so it survives
// copies and StatusOr; a Status without one is ErrorKind::kError. The code of
// the Status follows the kind (kGetTimeout: kDeadlineExceeded, ...), for
// readers that only look at codes. A task error (TaskError) also carries the
// exception's type, message and location (TaskErrorParts). Only the facade
// turns these into exceptions (core/worker's api_error.h, ThrowStatus).
// Pure functions, any thread.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace lumen {

// One per exception class in lumen/errors.h.
enum class ErrorKind : uint8_t {
  kError,            // lumen::Error (a Status with no kind too)
  kTask,             // TaskError: the remote task or method threw
  kTaskCancelled,    // TaskCancelledError
  kWorkerCrashed,    // WorkerCrashedError
  kOutOfMemory,      // OutOfMemoryError (a WorkerCrashedError)
  kObjectLost,       // ObjectLostError
  kOwnerDied,        // OwnerDiedError (an ObjectLostError)
  kActorDied,        // ActorDiedError
  kObjectStoreFull,  // ObjectStoreFullError
  kTypeMismatch,     // TypeMismatchError
  kGetTimeout,       // GetTimeoutError
  kPlacementGroup,   // PlacementGroupError
  kKv,               // KvError
  kCollective,       // CollectiveError
};
inline constexpr int kNumErrorKinds = static_cast<int>(ErrorKind::kCollective) + 1;

// The payload's type URL (absl::Status::SetPayload).
inline constexpr char kErrorKindPayload[] = "type.lumen.dev/lumen.ErrorKind";
inline constexpr char kTaskErrorPayload[] = "type.lumen.dev/lumen.TaskError";

// The name of `kind` ("ObjectLostError"): the payload's text.
[[nodiscard]] const char* ErrorKindName(ErrorKind kind);

// A Status (never OK) of `kind` whose message is `message`.
[[nodiscard]] absl::Status ErrorStatus(ErrorKind kind, absl::string_view message);

// The kind `status` carries; kError for one without (or an unknown name).
[[nodiscard]] ErrorKind ErrorKindOf(const absl::Status& status);

// What a remote task's exception was (TaskError's accessors).
struct TaskErrorParts {
  std::string exception_type;
  std::string task_message;
  std::string location;
};

// A kTask Status: `message` is what the user sees (TaskError::what()).
[[nodiscard]] absl::Status TaskErrorStatus(absl::string_view message,
                                           const TaskErrorParts& parts);

// The parts a kTask Status carries (empty ones for any other Status).
[[nodiscard]] TaskErrorParts TaskErrorPartsOf(const absl::Status& status);

}  // namespace lumen
