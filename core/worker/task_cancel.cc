// CoreWorker: lumen::Cancel. The submitter removes or marks the task when it
// holds it; a task still resolving its arguments is remembered and fails
// when they are ready. Called on any thread; the work runs on the io thread.
#include <string>

#include "absl/strings/str_cat.h"
#include "core/worker/normal_task_submitter.h"
#include "core/worker/object_table.h"
#include "core/worker/task_manager.h"
#include "lumen/worker/api_error.h"
#include "lumen/worker/core_worker.h"

namespace lumen::runtime {

void CoreWorker::CancelTask(const internal::RefHandle& ref, bool force) {
  if (ref.owner_address() != listen_address_) {
    ThrowError(ErrorKind::kError,
               absl::StrCat("lumen::Cancel: object ", ref.id().Hex().substr(0, 12),
                            " belongs to another process (", ref.owner_address(),
                            "); only the process that submitted a task can cancel it"));
  }
  ObjectId id = ref.id();
  PostToIo("worker.cancel_task", [this, id, force] {
    TaskId task = id.Task();
    if (submitter_->Cancel(task, force)) return;
    {
      ObjectTable::Locked objects(*object_table_);
      auto it = objects->find(id);
      // Finished (or failed) already: nothing to cancel.
      if (it == objects->end() || it->second.ready.load()) return;
    }
    // Not with the submitter and not ready: its arguments are still being
    // resolved (or it is submitted but not drained yet, which the post order
    // rules out, or an actor call, which is not cancelled).
    cancelled_unresolved_.insert(task);
  });
}

}  // namespace lumen::runtime
