// The owner side of actors: the table of actors this process created, and for
// each its creation, restarts (decided by its ActorLifecycle), kill, death, and
// the answer to every caller's "where is it now?".
//
//   actors::ActorOwner owner({.leaser = rt, .processes = rt, .names = rt});
//   owner.Add(std::move(spec));                 // the handle exists: CREATING
//   owner.Start(id);                            // its arguments are ready -> rt.RequestWorker
//   owner.OnLeaseGranted(id, g, where, lease);  // -> rt.StartProcess (connect, push the factory)
//   owner.OnCreated(id, g, std::nullopt);       // ALIVE: waiters learn the address
//   owner.OnProcessLost(id, g, why);            // restart (new generation) or death
//   owner.WhenSettled(id, "", [](ActorLocation where) { ... });
//
// Invariants: events of an older generation change nothing; an actor restarts
// at most max_restarts times; a dead actor stays dead (its name and arguments
// are released once); an entry is erased once the actor is dead and out of
// scope (no handle left anywhere, so no one can ask about it again).
//
// Only on its owner's thread (the runtime's io thread; checked in debug
// builds); not thread-safe. Waiter callbacks run on that thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "lumen/actors/actor_call.h"
#include "lumen/actors/actor_lifecycle.h"
#include "lumen/actors/actor_owner_runtime.h"
#include "lumen/common/ids.h"
#include "lumen/common/recent_set.h"
#include "lumen/common/thread_checker.h"

namespace lumen::actors {

// One actor this process created, as the owner keeps it.
struct OwnedActor {
  explicit OwnedActor(std::unique_ptr<ActorSpec> s)
      : spec(std::move(s)), life(spec->max_restarts) {}

  std::unique_ptr<ActorSpec> spec;
  ActorLifecycle life;
  WorkerPlacement placement;               // the current (or last) incarnation's worker
  std::unique_ptr<LeasedWorker> lease;     // null while none is held
  std::unique_ptr<ActorProcess> process;   // null while no process is linked
  bool out_of_scope = false;               // no handle left anywhere
  std::vector<std::function<void()>> on_change;  // run when it settles or dies
};

class ActorOwner {
 public:
  // What the owner asks of the runtime; each outlives the owner.
  struct Runtime {
    ActorLeaser& leaser;
    ActorProcessStarter& processes;
    ActorNameRecorder& names;
  };

  explicit ActorOwner(Runtime runtime) : runtime_(runtime) {}
  ActorOwner(const ActorOwner&) = delete;
  ActorOwner& operator=(const ActorOwner&) = delete;

  // --- from the runtime's submission path
  // Takes a new actor into the table (CREATING); nothing starts before Start.
  void Add(std::unique_ptr<ActorSpec> spec);
  // The factory's arguments are ready: asks for a worker for the first
  // incarnation. Unknown ids are ignored.
  void Start(const ObjectId& id);

  // --- answers to ActorLeaser::RequestWorker
  // A worker for incarnation `generation`. A stale grant (older generation,
  // dead or forgotten actor) or one from a node declared dead is ended (kill);
  // for the latter a new worker is asked for the same incarnation.
  void OnLeaseGranted(const ObjectId& id, int generation, WorkerPlacement where,
                      std::unique_ptr<LeasedWorker> lease);
  // No worker can be had (infeasible, placement group removed): the actor dies.
  void OnLeaseRefused(const ObjectId& id, int generation, const std::string& error);

  // --- reports of an ActorProcess
  // The factory returned (`factory_error` empty) or threw (the actor dies, no
  // restart).
  void OnCreated(const ObjectId& id, int generation,
                 const std::optional<TaskFailure>& factory_error);
  // The actor called ExitActor: its coming loss is no failure.
  void OnExiting(const ObjectId& id, int generation);
  // The process of `generation` is gone (its link closed, or never connected):
  // restart, or death (after asking its node for the cause when out of restarts).
  void OnProcessLost(const ObjectId& id, int generation, const absl::Status& why);
  // The cluster declared `node` dead: the links of actors there close (their
  // losses follow) and later grants from it are refused. Returns the actors
  // that ran there with their addresses (the runtime closes its own calls' channels).
  std::vector<std::pair<ObjectId, std::string>> OnNodeDead(const NodeId& node,
                                                           const absl::Status& why);

  // --- requests
  // Kill: with `no_restart` the actor dies (now, or when its process is gone);
  // without, its process is killed and it restarts if it may.
  void Kill(const ObjectId& id, bool no_restart, std::string why);
  // No handle is left anywhere: a non-detached actor is killed; the entry goes
  // once the actor is dead.
  void OnOutOfScope(const ObjectId& id);
  // Answers `cb` once the actor is alive at an address other than
  // `failed_address` ("" for any), or dead (also when unknown), now or later.
  // The answer carries the actor's max_task_retries.
  void WhenSettled(const ObjectId& id, const std::string& failed_address,
                   std::function<void(ActorLocation)> cb);

  // --- queries
  bool Owns(const ObjectId& id) const { return actors_.contains(id); }
  // 0 when unknown.
  int MaxTaskRetries(const ObjectId& id) const;
  // Every actor in the table (for `lumen list actors` and shutdown).
  void ForEach(const std::function<void(const OwnedActor&)>& visit) const;
  size_t size() const { return actors_.size(); }

 private:
  // Marks a public entry point: entries found dead and out of scope are erased
  // when the outermost one returns (callers further up may hold them).
  class Scope;

  OwnedActor* Find(const ObjectId& id);
  // The entry if `generation` is its current one and it is not dead.
  OwnedActor* FindCurrent(const ObjectId& id, int generation);
  void StartIncarnation(OwnedActor& actor);
  void RequestWorker(OwnedActor& actor, int generation);
  void SetDead(OwnedActor& actor, std::string why);
  // After the lifecycle said dead: releases its arguments and name, answers waiters.
  void OnDead(OwnedActor& actor);
  void NotifyWaiters(OwnedActor& actor);
  void OnExitCause(const ObjectId& id, int generation, const std::string& closed,
                   const std::string& cause);

  Runtime runtime_;
  absl::flat_hash_map<ObjectId, std::unique_ptr<OwnedActor>> actors_;
  // Nodes declared dead: a late grant from one is refused. One entry per dead
  // node incarnation of the cluster (they are not reused); the last
  // kRememberedDeadNodes only (a grant
  // crosses a death within seconds, not thousands of deaths later).
  static constexpr size_t kRememberedDeadNodes = 4096;
  RecentSet<NodeId> dead_nodes_{kRememberedDeadNodes};
  int depth_ = 0;                  // public entry points on the stack
  std::vector<ObjectId> forget_;   // dead and out of scope: erased at depth 0
  ThreadChecker thread_;
};

}  // namespace lumen::actors
