// What this process submitted and tracks until it ends: a task, actor call or
// actor creation (PendingTask), and an actor it created and manages
// (ActorRecord). Plain records, owned by whichever part holds them now (the
// submitter's queues, a lease's in-flight map, the actor submitter, the owned
// actors); io thread once enqueued. Internal to core/worker.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "lumen/actors/actor_call.h"
#include "lumen/actors/actor_lifecycle.h"
#include "lumen/common/connection.h"
#include "lumen/common/ids.h"
#include "lumen/internal/runtime.h"

namespace lumen::runtime {

// An actor this process created and so manages: its creation, restarts, and
// the answer to "where is it now?" for every caller.
//
// Its states, generations and the restart/kill decisions are `life`'s
// (actors::ActorLifecycle: CREATING -> ALIVE -> (RESTARTING -> ALIVE)* -> DEAD);
// the record adds the process it runs in. io thread only.
struct ActorRecord {
  explicit ActorRecord(int max_restarts) : life(max_restarts) {}
  ObjectId id;
  std::string factory;
  std::vector<internal::TaskArgument> args;  // kept for restarts
  internal::ActorOptions options;
  actors::ActorLifecycle life;
  std::string address;
  int pid = 0;
  WorkerId worker_id;
  uint64_t lease_id = 0;
  std::shared_ptr<Connection> lease_node;  // the node daemon that granted the lease
  NodeId node_id;
  std::vector<int> gpu_ids;
  std::shared_ptr<Connection> conn;  // ours to the actor process
  // No handle to it is left anywhere: the record goes once it is dead.
  bool out_of_scope = false;
  std::vector<std::function<void()>> on_change;  // run when alive or dead
};

// A task, actor call or actor creation this process submitted. The fields an
// actor call needs for ordering (task_id, function, sequence, attempt,
// resolved, dep_failure) are actors::ActorCall's. io thread once enqueued.
struct PendingTask : actors::ActorCall {
  ObjectId return_id;
  std::string display_name;  // SetName, or the function
  std::vector<internal::TaskArgument> args;  // holds the argument refs alive
  std::map<std::string, double> resources;
  internal::SchedulingOptions scheduling;
  std::string queue_key;
  int retries_left = 0;
  int max_retries = 0;
  int unresolved = 0;
  proto::TaskKind kind = proto::TaskKind::NORMAL;
  // Actor calls: the actor (its handle keeps it alive while calls are pending).
  std::shared_ptr<internal::RefHandle> actor;
  std::unique_ptr<ActorRecord> actor_record;  // actor creation: handed to owned_actors_
};

}  // namespace lumen::runtime
