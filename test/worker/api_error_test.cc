// The user API boundary's Status <-> exception translation (api_error.h,
// lumen/common/error_kind.h): every ErrorKind a runtime Status carries is
// thrown as its exception class with the Status's message, byte for byte;
// an object's failure (FailureStatus) reads as the exception Get threw before
// failures were Statuses. No processes, no sockets.
#include "lumen/worker/api_error.h"

#include <functional>
#include <stdexcept>
#include <string>
#include <typeindex>
#include <typeinfo>
#include <vector>

#include <catch2/catch.hpp>

#include "core/worker/object_value.h"
#include "lumen/common/error_kind.h"
#include "lumen/errors.h"

namespace lumen::runtime {
namespace {

// The dynamic type and text of what `fn` throws.
struct Thrown {
  std::type_index type = typeid(void);
  std::string what;
};
Thrown Catch(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return Thrown{typeid(e), e.what()};
  }
  return {};
}

TEST_CASE("each error kind is thrown as its exception with the Status's message",
          "[worker][api_error]") {
  // Invariant: ThrowStatus(ErrorStatus(kind, m)) throws exactly the class of
  // `kind` (not a base or a subclass), whose what() is m; the kind survives
  // copying the Status into a StatusOr.
  const std::vector<std::pair<ErrorKind, std::type_index>> kinds = {
      {ErrorKind::kError, typeid(Error)},
      {ErrorKind::kTaskCancelled, typeid(TaskCancelledError)},
      {ErrorKind::kWorkerCrashed, typeid(WorkerCrashedError)},
      {ErrorKind::kOutOfMemory, typeid(OutOfMemoryError)},
      {ErrorKind::kObjectLost, typeid(ObjectLostError)},
      {ErrorKind::kOwnerDied, typeid(OwnerDiedError)},
      {ErrorKind::kActorDied, typeid(ActorDiedError)},
      {ErrorKind::kObjectStoreFull, typeid(ObjectStoreFullError)},
      {ErrorKind::kTypeMismatch, typeid(TypeMismatchError)},
      {ErrorKind::kGetTimeout, typeid(GetTimeoutError)},
      {ErrorKind::kPlacementGroup, typeid(PlacementGroupError)},
      {ErrorKind::kKv, typeid(KvError)},
      {ErrorKind::kCollective, typeid(CollectiveError)},
      {ErrorKind::kTask, typeid(TaskError)},
  };
  REQUIRE(kinds.size() == static_cast<size_t>(kNumErrorKinds));
  for (const auto& [kind, type] : kinds) {
    const std::string message = std::string("object ab12 of ") + ErrorKindName(kind) + ": why";
    absl::StatusOr<int> carried = ErrorStatus(kind, message);
    REQUIRE_FALSE(carried.ok());
    CHECK(ErrorKindOf(carried.status()) == kind);
    Thrown thrown = Catch([&] { (void)ValueOrThrow(carried); });
    INFO(ErrorKindName(kind));
    CHECK(thrown.type == type);
    CHECK(thrown.what == message);
  }
}

TEST_CASE("a Status without a kind is a plain lumen::Error", "[worker][api_error]") {
  // Invariant: a Status made without ErrorStatus (any code) throws
  // lumen::Error with its message, not a subclass.
  const absl::Status status = absl::DeadlineExceededError("head call timed out");
  CHECK(ErrorKindOf(status) == ErrorKind::kError);
  Thrown thrown = Catch([&] { ThrowStatus(status); });
  CHECK(thrown.type == std::type_index(typeid(Error)));
  CHECK(thrown.what == "head call timed out");
}

TEST_CASE("a task error carries the exception's type, message and location",
          "[worker][api_error]") {
  // Invariant: the TaskError thrown for a kTask Status has the parts it was
  // made with, including ':' and digits inside them (the payload's separators).
  const TaskErrorParts parts{"std::runtime_error", "bad 3:4 input", "task Parse on node 1:2"};
  try {
    ThrowStatus(TaskErrorStatus("std::runtime_error: bad 3:4 input", parts));
    FAIL("nothing thrown");
  } catch (const TaskError& e) {
    CHECK(std::string(e.what()) == "std::runtime_error: bad 3:4 input");
    CHECK(e.exception_type() == parts.exception_type);
    CHECK(e.task_message() == parts.task_message);
    CHECK(e.location() == parts.location);
  }
  CHECK(TaskErrorPartsOf(absl::InternalError("x")).exception_type.empty());
}

TEST_CASE("an object's failure is thrown as it was before failures were Statuses",
          "[worker][api_error]") {
  // Invariant: FailureStatus + ThrowStatus give the exception class and the
  // exact text users saw when the getter threw: a task error reads
  // "<type>: <message> (in <location>)", a cancelled task is
  // TaskCancelledError whatever its kind, the exception_type markers pick
  // OutOfMemoryError and OwnerDiedError.
  struct Case {
    Failure failure;
    std::type_index type;
    std::string what;
  };
  const std::vector<Case> cases = {
      {Failure{proto::FailureKind::TASK_ERROR, "std::logic_error", "boom", "task F on n1"},
       typeid(TaskError), "std::logic_error: boom (in task F on n1)"},
      {Failure{proto::FailureKind::TASK_ERROR, "", "boom", ""}, typeid(TaskError), "boom"},
      {Failure{proto::FailureKind::FUNCTION_NOT_FOUND, "lumen::FunctionNotFound", "no F", "w"},
       typeid(TaskError), "lumen::FunctionNotFound: no F (in w)"},
      {Failure{proto::FailureKind::TASK_ERROR, "x", "cancelled", "", /*cancelled=*/true},
       typeid(TaskCancelledError), "cancelled"},
      {Failure{proto::FailureKind::WORKER_CRASHED, "", "died", ""}, typeid(WorkerCrashedError),
       "died"},
      {Failure{proto::FailureKind::WORKER_CRASHED, kOutOfMemoryErrorType, "oom", ""},
       typeid(OutOfMemoryError), "oom"},
      {Failure{proto::FailureKind::OBJECT_LOST, "", "lost", ""}, typeid(ObjectLostError), "lost"},
      {Failure{proto::FailureKind::OBJECT_LOST, kOwnerDiedErrorType, "owner", ""},
       typeid(OwnerDiedError), "owner"},
      {Failure{proto::FailureKind::ACTOR_DIED, "", "actor", ""}, typeid(ActorDiedError), "actor"},
      {Failure{proto::FailureKind::STORE_FULL, "", "full", ""}, typeid(ObjectStoreFullError),
       "full"},
      {Failure{proto::FailureKind::TYPE_MISMATCH, "", "int", ""}, typeid(TypeMismatchError), "int"},
      {Failure{proto::FailureKind::OTHER, "lumen::Error", "other", "w"}, typeid(Error), "other"},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    Thrown thrown = Catch([&] { ThrowStatus(FailureStatus(c.failure)); });
    CHECK(thrown.type == c.type);
    CHECK(thrown.what == c.what);
  }
}

TEST_CASE("an exception user code threw becomes a Status the executor reports",
          "[worker][api_error]") {
  // Invariant: inside a catch, ExecutorStatusOfCurrentException names a
  // TypeMismatchError and an ObjectLostError (OwnerDiedError too) by kind,
  // any other std::exception as a task error with its demangled type, and a
  // non-std exception as "unknown".
  auto of = [](const std::function<void()>& fn) {
    try {
      fn();
    } catch (...) {
      return ExecutorStatusOfCurrentException();
    }
    return absl::OkStatus();
  };
  absl::Status s = of([] { throw TypeMismatchError("want int"); });
  CHECK(ErrorKindOf(s) == ErrorKind::kTypeMismatch);
  CHECK(s.message() == "want int");
  s = of([] { throw OwnerDiedError("gone"); });
  CHECK(ErrorKindOf(s) == ErrorKind::kObjectLost);
  CHECK(s.message() == "gone");
  s = of([] { throw std::invalid_argument("bad"); });
  CHECK(ErrorKindOf(s) == ErrorKind::kTask);
  CHECK(TaskErrorPartsOf(s).exception_type == "std::invalid_argument");
  CHECK(TaskErrorPartsOf(s).task_message == "bad");
  s = of([] { throw 7; });
  CHECK(TaskErrorPartsOf(s).exception_type == "unknown");
  CHECK(TaskErrorPartsOf(s).task_message == "a non-std exception was thrown");
}

}  // namespace
}  // namespace lumen::runtime
