// The exceptions Lumen's user API throws. All derive from lumen::Error.
//
//   try {
//     int v = *lumen::Get(ref, std::chrono::seconds(2));
//   } catch (const lumen::TaskError& e) {        // the task threw
//     std::cerr << e.exception_type() << ": " << e.what();
//   } catch (const lumen::GetTimeoutError&) {     // not ready in time
//   }
#pragma once

#include <stdexcept>
#include <string>

namespace lumen {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// The remote task or method threw; carries the exception's type and message and
// where it ran.
class TaskError : public Error {
 public:
  TaskError(const std::string& message, std::string exception_type, std::string task_message,
            std::string location)
      : Error(message),
        exception_type_(std::move(exception_type)),
        task_message_(std::move(task_message)),
        location_(std::move(location)) {}
  const std::string& exception_type() const { return exception_type_; }
  const std::string& task_message() const { return task_message_; }
  const std::string& location() const { return location_; }

 private:
  std::string exception_type_;
  std::string task_message_;
  std::string location_;
};

class GetTimeoutError : public Error {
  using Error::Error;
};
// The worker running the task died, and its retries (max_retries) are spent.
class WorkerCrashedError : public Error {
  using Error::Error;
};
// lumen::Cancel(ref) ended the task before it produced its result (removed
// from the queue, or its worker killed with force=true); never retried.
class TaskCancelledError : public Error {
  using Error::Error;
};
class ActorDiedError : public Error {
  using Error::Error;
};
// Every copy of the object is gone (its owner or the node holding it died).
class ObjectLostError : public Error {
  using Error::Error;
};
class ObjectStoreFullError : public Error {
  using Error::Error;
};
// `Get<T>` of an object that holds another type.
class TypeMismatchError : public Error {
  using Error::Error;
};
class PlacementGroupError : public Error {
  using Error::Error;
};
// A key-value request failed: a limit (the text names it and its value), an
// invalid key, or the head could not be reached.
class KvError : public Error {
  using Error::Error;
};
// A collective operation failed: a member died or timed out, the group is
// unknown, or the ranks disagree on sizes. The text names the group and, when
// known, the rank that failed.
class CollectiveError : public Error {
  using Error::Error;
};

}  // namespace lumen
