#include "lumen/actors/actor_lifecycle.h"

#include <utility>

namespace lumen::actors {

int ActorLifecycle::BeginIncarnation() {
  exiting_ = false;
  return ++generation_;
}

bool ActorLifecycle::OnCreated(int generation) {
  if (generation != generation_ || state_ == ActorState::kDead) return false;
  state_ = ActorState::kAlive;
  return true;
}

void ActorLifecycle::OnExiting(int generation) {
  if (generation == generation_) exiting_ = true;
}

void ActorLifecycle::RequestKill(bool no_restart, std::string reason) {
  if (state_ == ActorState::kDead || !no_restart) return;
  kill_requested_ = true;
  kill_reason_ = std::move(reason);
}

LossDecision ActorLifecycle::OnProcessLost(int generation) {
  if (generation != generation_ || state_ == ActorState::kDead || dying_) return {};
  if (kill_requested_) {
    MarkDead(kill_reason_);
    return {LossAction::kDead, kill_reason_};
  }
  if (exiting_) {
    std::string why = "the actor exited on purpose (lumen::ExitActor)";
    MarkDead(why);
    return {LossAction::kDead, std::move(why)};
  }
  if (max_restarts_ < 0 || restarts_ < max_restarts_) {  // -1: without limit
    ++restarts_;
    state_ = ActorState::kRestarting;
    return {LossAction::kRestart, ""};
  }
  dying_ = true;
  return {LossAction::kAskCause, ""};
}

bool ActorLifecycle::MarkDead(std::string why) {
  if (state_ == ActorState::kDead) return false;
  state_ = ActorState::kDead;
  dying_ = false;
  death_ = std::move(why);
  return true;
}

const char* ActorStateName(ActorState state) {
  switch (state) {
    case ActorState::kCreating: return "PENDING_CREATION";
    case ActorState::kAlive: return "ALIVE";
    case ActorState::kRestarting: return "RESTARTING";
    case ActorState::kDead: return "DEAD";
  }
  return "UNKNOWN";
}

}  // namespace lumen::actors
