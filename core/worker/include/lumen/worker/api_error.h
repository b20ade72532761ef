// The user API boundary's one translation between a runtime Status and the
// typed exceptions of lumen/errors.h. Below the CoreWorker facade everything
// returns absl::Status/StatusOr; a failure the user must see as a particular
// exception carries its lumen::ErrorKind (lumen/common/error_kind.h), and the
// facade's entry points throw it here:
//
//   auto values = object_getter_->Get(refs, timeout);
//   if (!values.ok()) ThrowStatus(values.status());  // GetTimeoutError, TaskError...
//
// The other direction, for the executor running user code: what the user's
// exception was, as a Status of its kind (ExecutorStatusOfCurrentException).
// The only file of core/worker that includes lumen/errors.h is api_error.cc.
// Pure functions, any thread.
#pragma once

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "lumen/common/error_kind.h"

namespace lumen::runtime {

// Throws the exception of `status`'s kind with its message: TaskError (with
// the TaskErrorParts), GetTimeoutError, ObjectLostError, ..., lumen::Error for
// a Status without a kind. `status` must not be OK.
[[noreturn]] void ThrowStatus(const absl::Status& status);

// ThrowStatus(ErrorStatus(kind, message)).
[[noreturn]] void ThrowError(ErrorKind kind, absl::string_view message);

// The value, or throws its Status (ThrowStatus).
template <class T>
T ValueOrThrow(absl::StatusOr<T> value) {
  if (!value.ok()) ThrowStatus(value.status());
  return *std::move(value);
}

// Inside a catch block only: the exception being handled, thrown by user code
// an executor ran, as the task's failure reports it: kTypeMismatch for a
// TypeMismatchError, kObjectLost for an ObjectLostError (OwnerDiedError
// included), else kTask whose TaskErrorParts name the exception's type (or
// "unknown" for one not derived from std::exception) and its what().
[[nodiscard]] absl::Status ExecutorStatusOfCurrentException();

}  // namespace lumen::runtime
