// Status <-> the user API's exceptions (api_error.h).
#include "lumen/worker/api_error.h"

#include <exception>
#include <string>
#include <typeinfo>

#include "lumen/common/codec_type_name.h"
#include "lumen/errors.h"

namespace lumen::runtime {

void ThrowStatus(const absl::Status& status) {
  const std::string message(status.message());
  switch (ErrorKindOf(status)) {
    case ErrorKind::kTask: {
      TaskErrorParts parts = TaskErrorPartsOf(status);
      throw TaskError(message, std::move(parts.exception_type), std::move(parts.task_message),
                      std::move(parts.location));
    }
    case ErrorKind::kTaskCancelled:
      throw TaskCancelledError(message);
    case ErrorKind::kWorkerCrashed:
      throw WorkerCrashedError(message);
    case ErrorKind::kOutOfMemory:
      throw OutOfMemoryError(message);
    case ErrorKind::kObjectLost:
      throw ObjectLostError(message);
    case ErrorKind::kOwnerDied:
      throw OwnerDiedError(message);
    case ErrorKind::kActorDied:
      throw ActorDiedError(message);
    case ErrorKind::kObjectStoreFull:
      throw ObjectStoreFullError(message);
    case ErrorKind::kTypeMismatch:
      throw TypeMismatchError(message);
    case ErrorKind::kGetTimeout:
      throw GetTimeoutError(message);
    case ErrorKind::kPlacementGroup:
      throw PlacementGroupError(message);
    case ErrorKind::kKv:
      throw KvError(message);
    case ErrorKind::kCollective:
      throw CollectiveError(message);
    case ErrorKind::kError:
      break;
  }
  throw Error(message);
}

void ThrowError(ErrorKind kind, absl::string_view message) {
  ThrowStatus(ErrorStatus(kind, message));
}

absl::Status ExecutorStatusOfCurrentException() {
  try {
    throw;
  } catch (const TypeMismatchError& e) {
    return ErrorStatus(ErrorKind::kTypeMismatch, e.what());
  } catch (const ObjectLostError& e) {
    return ErrorStatus(ErrorKind::kObjectLost, e.what());
  } catch (const std::exception& e) {
    return TaskErrorStatus(e.what(), {codec::Demangle(typeid(e).name()), e.what(), ""});
  } catch (...) {
    return TaskErrorStatus("a non-std exception was thrown",
                           {"unknown", "a non-std exception was thrown", ""});
  }
}

}  // namespace lumen::runtime
