// What the owner-side actor manager (ActorOwner, actor_owner.h) needs from the
// runtime, as small interfaces that core/worker implements (and tests fake):
// a worker leased for each incarnation, a link to that worker's process that
// pushes the creation task, and the head's name directory.
//
//   class Runtime : public actors::ActorLeaser, public actors::ActorProcessStarter,
//                   public actors::ActorNameRecorder { ... };   // in core/worker
//   actors::ActorOwner owner({.leaser = rt, .processes = rt, .names = rt});
//
// Every method is called on the owner's thread (the runtime's io thread), and
// the runtime answers the owner on that thread too, never from inside the call
// that asked.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "lumen/common/ids.h"

namespace lumen::actors {

// What the owner reads of an actor it created; fixed at creation. The runtime
// derives its own record from it (the factory's arguments, the resources, the
// scheduling options), as its task record derives from ActorCall.
struct ActorSpec {
  virtual ~ActorSpec() = default;

  ObjectId id;
  std::string factory;
  std::string name;  // "" when unnamed
  bool detached = false;  // outlives its handles (and its owner, through the head)
  int max_restarts = 0;
  int max_task_retries = 0;
};

// Where one incarnation runs: the worker a lease gave it.
struct WorkerPlacement {
  NodeId node_id;
  WorkerId worker_id;
  int pid = 0;
  std::string address;  // the worker process's address
  std::vector<int> gpu_ids;
};

// A worker leased for one incarnation, through the node daemon that granted it.
// Owned by the owner while the incarnation lasts.
class LeasedWorker {
 public:
  virtual ~LeasedWorker() = default;
  // Ends the lease; with `kill` its node kills the process (whose link then
  // reports the loss). A no-op when the node is unreachable.
  virtual void End(bool kill) = 0;
  // Whether the node that granted the lease can still be told (End reaches it).
  virtual bool NodeReachable() const = 0;
  // Asks that node how the worker's process ended; `done` runs once (now when
  // the node cannot be asked, else later) with the cause ("killed by signal 9") or "" when the node cannot say within
  // its deadline. The answer does not need this object to live on.
  virtual void AskExitCause(std::function<void(std::string cause)> done) = 0;
};

// Asks for workers.
class ActorLeaser {
 public:
  virtual ~ActorLeaser() = default;
  // Asks for a worker for incarnation `generation` of `actor`; the runtime
  // answers later with ActorOwner::OnLeaseGranted or OnLeaseRefused. An error
  // when no request can be made now (the actor dies with its message).
  [[nodiscard]] virtual absl::Status RequestWorker(const ActorSpec& actor, int generation) = 0;
};

// The owner's link to the process of one incarnation. Dropping it makes the
// runtime forget the incarnation: its later events are not reported, and a
// link still connecting pushes nothing (the process itself ends with its lease).
class ActorProcess {
 public:
  virtual ~ActorProcess() = default;
  // Ends the link: the loss is reported (OnProcessLost) once the link is down.
  virtual void Close(const absl::Status& why) = 0;
};

// Starts processes: connects to a leased worker and pushes the creation task.
class ActorProcessStarter {
 public:
  virtual ~ActorProcessStarter() = default;
  // Connects to `where.address` without blocking and pushes the creation task
  // of `actor` (its `attempt`: 0, then the restart count). The runtime reports
  // ActorOwner::OnCreated, OnExiting and OnProcessLost (a failed connect too)
  // for `generation`, never from inside this call.
  virtual std::unique_ptr<ActorProcess> StartProcess(const ActorSpec& actor, int generation,
                                                     const WorkerPlacement& where,
                                                     uint32_t attempt) = 0;
  // The actor is dead: what the runtime kept for restarts (the factory's
  // arguments) can go.
  virtual void ReleaseCreation(ActorSpec& actor) = 0;
};

// The head's directory of named actors, told asynchronously (failures are the
// runtime's to log).
class ActorNameRecorder {
 public:
  virtual ~ActorNameRecorder() = default;
  // A named detached actor runs at `address` now: callers whose owner is gone
  // find it there.
  virtual void RecordAddress(const ActorSpec& actor, const std::string& address) = 0;
  // A named actor died: its name is free.
  virtual void ReleaseName(const ActorSpec& actor) = 0;
};

}  // namespace lumen::actors
