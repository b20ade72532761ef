// The dependency resolver of one driver or worker process: holds a submitted
// task until every ObjectRef argument of it is ready here (or failed), asking
// the owners of borrowed arguments for their values, then hands it on.
//
//   DependencyResolver resolver(table, {.request_from_owner = ..., .on_resolved = ...});
//   resolver.Resolve(task);          // on_resolved(task) now or when the last arg is ready
//   if (auto f = resolver.FailedArgument(*task)) ...   // fail it with the same error
//
// Only on the io thread: the callbacks it registers run there (the memory
// store hands on_ready callbacks to the io thread); reads the object table
// under its lock. Internal to core/worker.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "core/worker/object_table.h"
#include "core/worker/pending_task.h"
#include "lumen/common/ids.h"

namespace lumen::runtime {

class DependencyResolver {
 public:
  struct Callbacks {
    // A borrowed argument is not here yet: ask `owner` for it (io thread).
    std::function<void(const ObjectId&, const std::string& owner)> request_from_owner;
    // Every argument of `task` is ready (or failed); it is the callee's again.
    std::function<void(PendingTask* task)> on_resolved;
  };

  // `table` outlives the resolver.
  DependencyResolver(ObjectTable& table, Callbacks callbacks);

  // Waits for the arguments of `task` (not owned here: whoever owns the task
  // keeps it alive until on_resolved runs for it, exactly once).
  void Resolve(PendingTask* task);
  // The failure of the first argument of `task` that failed, if any.
  std::optional<Failure> FailedArgument(const PendingTask& task);

 private:
  ObjectTable& table_;
  const Callbacks callbacks_;
};

}  // namespace lumen::runtime
