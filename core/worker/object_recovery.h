// Lineage reconstruction for one owner process (Ray's ObjectRecoveryManager
// plus the lineage half of its TaskManager, smaller): the owner keeps the
// specification of each finished normal task whose result went to a node's
// store (its "lineage": function, arguments, placement, retry budget) while
// that result is referenced; when every copy of such an object is lost (the
// node holding it died), the task runs again under the same task id and
// return id, within its retry budget (max_retries, -1: without limit), its
// arguments resolved again (lost ones rebuilt the same way first), and the
// Get waiting for the object gets the rebuilt value.
//
//   ObjectRecovery recovery(table, tasks, {.max_lineage_bytes = 1 << 30},
//                           {.resubmit = [&](std::unique_ptr<PendingTask> t) { ... }});
//   recovery.KeepLineage(std::move(task));      // it completed with a stored result
//   recovery.OnLost({id}, "its only copy was on node N, which died");
//   recovery.Forget(id);                        // the object was freed
//
// What is not rebuilt fails with ObjectLostError saying why: objects made by
// Put, actor calls' results, results of tasks with max_retries=0 or whose
// retries are spent, cancelled tasks, and objects whose lineage was released
// to stay under the cap.
//
// Memory: a kept task costs EstimateBytes(task) in this process (about 400
// bytes plus its name and its inline arguments), counted against
// `max_lineage_bytes` (LUMEN_MAX_LINEAGE_BYTES, default 1 GiB, as Ray's
// RAY_max_lineage_bytes); over it the oldest lineage is released first. A kept
// task also holds its argument refs, so a chain's stored intermediate objects
// stay in the store while a later result of the chain is referenced (Ray keeps
// their lineage but may free their values; here both stay until released).
//
// Only on the io thread (checked in debug builds), except Clear (after the io
// thread has ended). Internal to core/worker.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "core/worker/object_table.h"
#include "core/worker/pending_task.h"
#include "core/worker/task_manager.h"
#include "lumen/common/ids.h"
#include "lumen/common/thread_checker.h"

namespace lumen::runtime {

class ObjectRecovery {
 public:
  static constexpr uint64_t kDefaultMaxLineageBytes = 1ull << 30;

  struct Options {
    uint64_t max_lineage_bytes = kDefaultMaxLineageBytes;
    // max_lineage_bytes from LUMEN_MAX_LINEAGE_BYTES (0: keep no lineage).
    static Options FromEnv();
  };
  struct Callbacks {
    // Runs `task` again: its return object is pending once more; resolve its
    // arguments (waiting for those being rebuilt) and queue it with its
    // placement (`task->placement`). io thread.
    std::function<void(std::unique_ptr<PendingTask>)> resubmit;
  };

  // `table` and `tasks` outlive the recovery.
  ObjectRecovery(ObjectTable& table, TaskManager& tasks, Options options, Callbacks callbacks);
  ObjectRecovery(const ObjectRecovery&) = delete;
  ObjectRecovery& operator=(const ObjectRecovery&) = delete;

  // `task` completed and its return object is ready. A normal task whose
  // result is stored (and still referenced) is kept, with its placement
  // (`task->placement`, needed to queue it again), as that object's lineage;
  // otherwise it is destroyed here, and for a stored result that cannot be
  // rebuilt (an actor call, max_retries=0, retries spent, cancelled) the
  // reason is remembered for the error. Over the cap, the oldest lineage goes.
  void KeepLineage(std::unique_ptr<PendingTask> task);
  // The owned object `id` was freed: its lineage (which releases the task's
  // argument refs) or its note goes. Cheap when there is none.
  void Forget(const ObjectId& id);
  // Every copy of each of `lost` (objects this process owns, stored and ready)
  // is gone; `why` says how ("its only copy was on node N, which died"). Each
  // one whose task may run again becomes pending and its task is resubmitted
  // (all are marked pending before any is resubmitted, so a task whose
  // argument is lost too waits for that argument's rebuild); the others fail
  // with ObjectLostError: "object ID: WHY; it cannot be rebuilt: REASON".
  // `dead_node`: the node whose death lost them (a task that must run there,
  // a hard NodeAffinity, is not run again). Returns how many are being rebuilt.
  size_t OnLost(const std::vector<ObjectId>& lost, const std::string& why,
                const NodeId& dead_node = NodeId::Nil());
  // Drops every kept task (their refs go). Only once the io thread has ended.
  void Clear();

  // What a kept task costs this process, estimated (bytes).
  static uint64_t EstimateBytes(const PendingTask& task);
  // Kept tasks and their estimated bytes now.
  size_t kept() const { return kept_.size(); }
  uint64_t kept_bytes() const { return kept_bytes_; }

 private:
  // Why an object cannot be rebuilt (no entry: it was made by Put).
  enum class Reason : uint8_t {
    kActorCall,
    kNoRetries,
    kRetriesSpent,
    kCancelled,
    kEvicted,
    kPinnedToDeadNode,
  };
  struct Kept {
    std::unique_ptr<PendingTask> task;
    uint64_t bytes = 0;
    uint64_t seq = 0;  // its place in order_
  };

  std::string ReasonText(const ObjectId& id) const;
  // Releases the oldest lineage until the kept bytes fit the cap.
  void EvictOverCap();
  // Drops order_'s stale entries once they outnumber the live ones.
  void MaybeCompactOrder();

  ObjectTable& table_;
  TaskManager& tasks_;
  const Options options_;
  const Callbacks callbacks_;
  ThreadChecker io_thread_;
  // The lineage of each rebuildable object, by return object id.
  absl::flat_hash_map<ObjectId, Kept> kept_;
  // Kept ids, oldest first, with their seq (an entry whose seq no longer
  // matches kept_ is stale: forgotten or taken for a rebuild).
  std::deque<std::pair<ObjectId, uint64_t>> order_;
  uint64_t next_seq_ = 1;
  uint64_t kept_bytes_ = 0;
  // Stored results that cannot be rebuilt, and why (until freed or failed).
  absl::flat_hash_map<ObjectId, Reason> notes_;
};

}  // namespace lumen::runtime
