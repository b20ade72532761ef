// What this process submitted and tracks until it ends: a task, actor call or
// actor creation (PendingTask), and an actor it created (ActorRecord). Plain
// records, owned by whichever part holds them now (the submitter's queues, a
// lease's in-flight map, the actor submitter, the actor owner); io thread once
// enqueued. Internal to core/worker.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "lumen/actors/actor_call.h"
#include "lumen/actors/actor_owner_runtime.h"
#include "lumen/common/connection.h"
#include "lumen/common/ids.h"
#include "lumen/common/task_events.h"
#include "lumen/internal/runtime.h"

namespace lumen::runtime {

// An actor this process created, as the runtime keeps it: the owner-side
// manager's spec (actors::ActorSpec: id, factory, name, restarts) plus what the
// runtime needs to place and start it again. Owned by actors::ActorOwner once
// submitted; io thread only.
struct ActorRecord : actors::ActorSpec {
  std::vector<internal::TaskArgument> args;  // kept for restarts, released at death
  std::map<std::string, double> resources;   // held while alive
  std::map<std::string, double> placement;   // needed to place it
  internal::SchedulingOptions scheduling;
  int max_concurrency = 1;
};

// What a task that asks for nothing needs: {CPU: 1}, as in Ray.
inline const std::map<std::string, double>& DefaultTaskResources() {
  static const std::map<std::string, double> kDefault{{"CPU", 1}};
  return kDefault;
}

// Where a normal task may run, as submitted. The submitter reads it once to
// find (or make) the task's scheduling queue, which keeps one copy per shape,
// then frees it: a queued task does not carry it (issue 17: memory per queued
// task).
struct TaskPlacement {
  std::map<std::string, double> resources;  // empty: DefaultTaskResources()
  internal::SchedulingOptions scheduling;
  std::string queue_key;  // the scheduling queue's key (resources + strategy)
};

// A task, actor call or actor creation this process submitted. The fields an
// actor call needs for ordering (task_id, function, sequence, attempt,
// resolved, dep_failure) are actors::ActorCall's. io thread once enqueued.
//
// Kept small (100,000s may wait in the queues): what a queued task does not
// need is behind a pointer or freed once read.
struct PendingTask : actors::ActorCall {
  ObjectId return_id;
  // SetName's name; empty when it has none (name() is then the function), so
  // that unnamed tasks do not carry a second copy of the function's name.
  std::string display_name;
  std::vector<internal::TaskArgument> args;  // holds the argument refs alive
  // Normal tasks, from submission until the submitter queued it; null after.
  std::unique_ptr<TaskPlacement> placement;
  int retries_left = 0;  // negative: without limit
  int max_retries = 0;   // as submitted; -1: without limit
  bool retry_exceptions = false;  // a TaskError result is retried too
  // lumen::Cancel ended it: its return object has failed already; whatever
  // the worker answers is dropped, and it is never retried.
  bool cancelled = false;
  int unresolved = 0;
  proto::TaskKind kind = proto::TaskKind::NORMAL;
  // The tick of this attempt's SUBMITTED task event (0: not recorded), so
  // that FINISHED/FAILED carry the latency (TaskEventDetail::since_tick).
  uint64_t submitted_tick = 0;
  // Where SUBMITTED's record went: FINISHED takes it over while it is undrained.
  TaskEventMark submitted_mark;
  // The ticks of DEPENDENCIES_READY and LEASE_GRANTED (0: not yet), and the
  // lease's node and worker pid: folded into the FINISHED/FAILED record
  // (TaskEventDetail::earlier_ticks) rather than recorded each. lease_tick is
  // set where an actor call goes out, through a const reference: mutable.
  uint64_t dependencies_ready_tick = 0;
  mutable uint64_t lease_tick = 0;
  NodeId lease_node;
  int32_t lease_worker_pid = 0;
  // Actor calls: the actor (its handle keeps it alive while calls are pending).
  std::shared_ptr<internal::RefHandle> actor;
  std::unique_ptr<ActorRecord> actor_record;  // actor creation: handed to the actor owner

  // The name to show: SetName's, else the function's.
  const std::string& name() const { return display_name.empty() ? function : display_name; }
};

}  // namespace lumen::runtime
