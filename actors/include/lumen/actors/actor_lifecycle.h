// The lifecycle of one actor as its owner sees it: an explicit state machine
// with generation numbers and the restart/kill decisions.
//
//   ActorLifecycle life(/*max_restarts=*/2);
//   int g = life.BeginIncarnation();          // lease a worker, push the factory
//   life.OnCreated(g);                        // kCreating -> kAlive
//   switch (life.OnProcessLost(g).action) {   // its process died
//     case LossAction::kRestart: g = life.BeginIncarnation(); ...   // kRestarting
//     case LossAction::kAskCause: ... life.MarkDead(cause);          // out of restarts
//     ...
//   }
//
// Pure logic: no sockets, no clock. Only on its owner's thread (not thread-safe).
#pragma once

#include <string>

namespace lumen::actors {

// States and transitions (generation g counts incarnations, 1 for the first):
//
//   kCreating   --OnCreated(g)-->                     kAlive
//   kAlive      --OnProcessLost(g), restarts left-->  kRestarting  (restarts + 1)
//   kRestarting --OnCreated(g)-->                     kAlive
//   any but kDead --MarkDead(why)-->                  kDead   (kill, out of scope,
//                                                     factory failed, out of restarts,
//                                                     placement impossible)
//
// kDead is final. Events carry the generation they belong to; an event of an
// older generation is stale and changes nothing.
enum class ActorState { kCreating, kAlive, kRestarting, kDead };

// What the owner does when the process of the current incarnation is lost.
enum class LossAction {
  kIgnore,    // stale, already dead, or already waiting for the cause
  kDead,      // killed or exited on purpose: MarkDead(reason) was called
  kRestart,   // restarts left: call BeginIncarnation() and start it again
  kAskCause,  // out of restarts: learn how the process ended, then MarkDead
};

struct LossDecision {
  LossAction action = LossAction::kIgnore;
  std::string reason;  // kDead: why it died
};

class ActorLifecycle {
 public:
  // `max_restarts`: how many times a lost process is replaced; -1: always.
  explicit ActorLifecycle(int max_restarts) : max_restarts_(max_restarts) {}

  ActorState state() const { return state_; }
  // The current incarnation (0 before the first BeginIncarnation).
  int generation() const { return generation_; }
  int restarts() const { return restarts_; }
  int max_restarts() const { return max_restarts_; }
  bool IsDead() const { return state_ == ActorState::kDead; }
  bool IsCurrent(int generation) const { return generation == generation_; }
  // Out of restarts and lost: waiting (briefly) to learn how the process ended.
  // Callers wait as for a restart.
  bool dying() const { return dying_; }
  // Kill(no_restart) or out of scope: the next loss (or now) is death.
  bool kill_requested() const { return kill_requested_; }
  const std::string& kill_reason() const { return kill_reason_; }
  // Why it is dead (empty before).
  const std::string& death() const { return death_; }
  // Alive and answering calls: callers may be told its address.
  bool Settled() const { return state_ == ActorState::kAlive && !dying_; }

  // Starts a new incarnation (the first, or a restart): returns its generation.
  // Requires !IsDead().
  int BeginIncarnation();
  // The factory of incarnation `generation` returned. Returns false (and
  // changes nothing) when stale or dead.
  bool OnCreated(int generation);
  // The actor called ExitActor in incarnation `generation`: its coming loss is
  // no failure.
  void OnExiting(int generation);
  // The owner asks for its end: with `no_restart` the actor dies at its next
  // loss (the caller kills the process) and never restarts.
  void RequestKill(bool no_restart, std::string reason);
  // The process of incarnation `generation` is gone (connection closed, lease
  // lost). Decides what follows; see LossAction.
  LossDecision OnProcessLost(int generation);
  // kAskCause finished (or a replacement lease arrived): no longer dying.
  void ClearDying() { dying_ = false; }
  // Final. Returns false when it was dead already (then `why` is dropped).
  bool MarkDead(std::string why);

 private:
  int max_restarts_;
  ActorState state_ = ActorState::kCreating;
  int generation_ = 0;
  int restarts_ = 0;
  bool dying_ = false;
  bool exiting_ = false;
  bool kill_requested_ = false;
  std::string kill_reason_;
  std::string death_;
};

// "PENDING_CREATION", "ALIVE", "RESTARTING", "DEAD" (as `lumen list actors` shows).
const char* ActorStateName(ActorState state);

}  // namespace lumen::actors
