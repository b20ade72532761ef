#include "lumen/actors/actor_owner.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "lumen/common/logging.h"

namespace lumen::actors {

class ActorOwner::Scope {
 public:
  explicit Scope(ActorOwner& owner) : owner_(owner) {
    owner_.thread_.Check("ActorOwner");
    ++owner_.depth_;
  }
  ~Scope() {
    if (--owner_.depth_ > 0) return;
    auto forget = std::move(owner_.forget_);
    owner_.forget_.clear();
    for (const ObjectId& id : forget) {
      auto it = owner_.actors_.find(id);
      if (it != owner_.actors_.end() && it->second->life.IsDead() && it->second->out_of_scope) {
        owner_.actors_.erase(it);
      }
    }
  }

 private:
  ActorOwner& owner_;
};

OwnedActor* ActorOwner::Find(const ObjectId& id) {
  auto it = actors_.find(id);
  return it == actors_.end() ? nullptr : it->second.get();
}

OwnedActor* ActorOwner::FindCurrent(const ObjectId& id, int generation) {
  OwnedActor* actor = Find(id);
  if (actor == nullptr || !actor->life.IsCurrent(generation) || actor->life.IsDead()) {
    return nullptr;
  }
  return actor;
}

void ActorOwner::Add(std::unique_ptr<ActorSpec> spec) {
  Scope scope(*this);
  ObjectId id = spec->id;
  actors_[id] = std::make_unique<OwnedActor>(std::move(spec));
}

void ActorOwner::Start(const ObjectId& id) {
  Scope scope(*this);
  if (OwnedActor* actor = Find(id)) StartIncarnation(*actor);
}

void ActorOwner::StartIncarnation(OwnedActor& actor) {
  if (actor.life.IsDead()) return;
  RequestWorker(actor, actor.life.BeginIncarnation());
}

void ActorOwner::RequestWorker(OwnedActor& actor, int generation) {
  absl::Status asked = runtime_.leaser.RequestWorker(*actor.spec, generation);
  if (!asked.ok()) SetDead(actor, std::string(asked.message()));
}

void ActorOwner::OnLeaseGranted(const ObjectId& id, int generation, WorkerPlacement where,
                                std::unique_ptr<LeasedWorker> lease) {
  Scope scope(*this);
  OwnedActor* actor = FindCurrent(id, generation);
  if (actor == nullptr) {
    lease->End(/*kill=*/true);
    return;
  }
  if (dead_nodes_.Contains(where.node_id)) {
    // The grant crossed the node's death: nothing may run there. The
    // incarnation never started, so this costs no restart.
    lease->End(/*kill=*/true);
    LUMEN_LOG(INFO) << "actor " << id.Hex().substr(0, 12) << ": a worker on dead node "
                    << where.node_id.Hex().substr(0, 12) << " was granted; asking again";
    RequestWorker(*actor, generation);
    return;
  }
  actor->placement = std::move(where);
  actor->lease = std::move(lease);
  actor->life.ClearDying();
  if (actor->life.kill_requested()) {
    actor->lease->End(/*kill=*/true);
    SetDead(*actor, actor->life.kill_reason());
    return;
  }
  actor->process = runtime_.processes.StartProcess(
      *actor->spec, generation, actor->placement, static_cast<uint32_t>(actor->life.restarts()));
}

void ActorOwner::OnLeaseRefused(const ObjectId& id, int generation, const std::string& error) {
  Scope scope(*this);
  OwnedActor* actor = FindCurrent(id, generation);
  if (actor == nullptr) return;
  SetDead(*actor, absl::StrCat("cannot place the actor: ", error));
}

void ActorOwner::OnCreated(const ObjectId& id, int generation,
                           const std::optional<TaskFailure>& factory_error) {
  Scope scope(*this);
  OwnedActor* actor = FindCurrent(id, generation);
  if (actor == nullptr) return;
  if (factory_error) {
    std::string why = absl::StrCat("the actor's factory ", actor->spec->factory, " failed: ",
                                   factory_error->exception_type,
                                   factory_error->exception_type.empty() ? "" : ": ",
                                   factory_error->message);
    actor->life.RequestKill(/*no_restart=*/true, why);
    if (actor->lease) actor->lease->End(/*kill=*/true);
    SetDead(*actor, std::move(why));
    return;
  }
  actor->life.OnCreated(generation);
  if (actor->spec->detached && !actor->spec->name.empty()) {
    runtime_.names.RecordAddress(*actor->spec, actor->placement.address);
  }
  NotifyWaiters(*actor);
}

void ActorOwner::OnExiting(const ObjectId& id, int generation) {
  Scope scope(*this);
  if (OwnedActor* actor = Find(id)) actor->life.OnExiting(generation);
}

void ActorOwner::OnProcessLost(const ObjectId& id, int generation, const absl::Status& why) {
  Scope scope(*this);
  OwnedActor* actor = FindCurrent(id, generation);
  if (actor == nullptr || actor->life.dying()) return;
  // Make sure the process is gone and its resources are free.
  std::unique_ptr<LeasedWorker> lease = std::move(actor->lease);
  if (lease) lease->End(/*kill=*/true);
  actor->process.reset();
  LossDecision decision = actor->life.OnProcessLost(generation);
  switch (decision.action) {
    case LossAction::kIgnore:
      return;
    case LossAction::kDead:
      OnDead(*actor);
      return;
    case LossAction::kRestart:
      LUMEN_LOG(INFO) << "actor " << id.Hex().substr(0, 12) << " died (" << why << "); restart "
                      << actor->life.restarts() << " of " << actor->life.max_restarts();
      StartIncarnation(*actor);
      return;
    case LossAction::kAskCause:
      break;
  }
  // Dead for good: first learn from its node daemon how the process ended (its
  // socket closes before the daemon reaps it), so the error says why. Callers
  // wait meanwhile as they would for a restart.
  std::string closed(why.message());
  auto answer = [this, id, generation, closed](std::string cause) {
    OnExitCause(id, generation, closed, cause);
  };
  if (lease) {
    lease->AskExitCause(std::move(answer));
  } else {
    answer("");
  }
}

void ActorOwner::OnExitCause(const ObjectId& id, int generation, const std::string& closed,
                             const std::string& cause) {
  Scope scope(*this);
  OwnedActor* actor = FindCurrent(id, generation);
  if (actor == nullptr) return;
  actor->life.ClearDying();
  if (actor->life.kill_requested()) {
    SetDead(*actor, actor->life.kill_reason());
    return;
  }
  const ActorSpec& spec = *actor->spec;
  const WorkerPlacement& where = actor->placement;
  SetDead(*actor,
          absl::StrCat("the actor's process (pid ", where.pid, ", actor ",
                       spec.name.empty() ? spec.factory
                                         : absl::StrCat("'", spec.name, "' (", spec.factory, ")"),
                       ", on node ",
                       where.node_id.IsNil() ? "?" : where.node_id.Hex().substr(0, 12),
                       ") died unexpectedly: ", cause.empty() ? closed : cause,
                       spec.max_restarts != 0
                           ? absl::StrCat(" (after ", actor->life.restarts(), " restarts)")
                           : std::string()));
}

std::vector<std::pair<ObjectId, std::string>> ActorOwner::OnNodeDead(const NodeId& node,
                                                                     const absl::Status& why) {
  Scope scope(*this);
  dead_nodes_.Insert(node);
  std::vector<std::pair<ObjectId, int>> doomed;
  std::vector<std::pair<ObjectId, std::string>> placed;
  for (const auto& [id, actor] : actors_) {
    if (actor->placement.node_id != node || !actor->process) continue;
    doomed.emplace_back(id, actor->life.generation());
    placed.emplace_back(id, actor->placement.address);
  }
  // Closing reports losses, which change the table: look each up again.
  for (const auto& [id, generation] : doomed) {
    OwnedActor* actor = FindCurrent(id, generation);
    if (actor != nullptr && actor->process) actor->process->Close(why);
  }
  return placed;
}

void ActorOwner::SetDead(OwnedActor& actor, std::string why) {
  if (actor.life.MarkDead(std::move(why))) OnDead(actor);
}

void ActorOwner::OnDead(OwnedActor& actor) {
  // A dead actor has no incarnation: a link still connecting pushes nothing.
  actor.process.reset();
  runtime_.processes.ReleaseCreation(*actor.spec);
  if (!actor.spec->name.empty()) runtime_.names.ReleaseName(*actor.spec);
  NotifyWaiters(actor);
  if (actor.out_of_scope) forget_.push_back(actor.spec->id);
}

void ActorOwner::NotifyWaiters(OwnedActor& actor) {
  auto callbacks = std::move(actor.on_change);
  actor.on_change.clear();
  for (auto& cb : callbacks) cb();
}

void ActorOwner::Kill(const ObjectId& id, bool no_restart, std::string why) {
  Scope scope(*this);
  OwnedActor* actor = Find(id);
  if (actor == nullptr || actor->life.IsDead()) return;
  actor->life.RequestKill(no_restart, std::move(why));
  if (actor->process && actor->lease && actor->lease->NodeReachable()) {
    // The node kills the process; its link closing finishes the job.
    actor->lease->End(/*kill=*/true);
  } else if (actor->life.kill_requested()) {
    SetDead(*actor, actor->life.kill_reason());
  }
}

void ActorOwner::OnOutOfScope(const ObjectId& id) {
  Scope scope(*this);
  OwnedActor* actor = Find(id);
  if (actor == nullptr) return;
  actor->out_of_scope = true;
  if (actor->life.IsDead()) {
    forget_.push_back(id);
    return;
  }
  if (actor->spec->detached) return;
  Kill(id, /*no_restart=*/true, "all handles to the actor went out of scope");
}

void ActorOwner::WhenSettled(const ObjectId& id, const std::string& failed_address,
                             std::function<void(ActorLocation)> cb) {
  Scope scope(*this);
  OwnedActor* actor = Find(id);
  if (actor == nullptr) {
    cb(ActorLocation{false, "", "the actor is unknown to its owner (it may have gone out of scope)",
                     std::nullopt});
    return;
  }
  if (actor->life.IsDead()) {
    cb(ActorLocation{false, "", actor->life.death(), actor->spec->max_task_retries});
  } else if (actor->life.Settled() && actor->placement.address != failed_address) {
    cb(ActorLocation{true, actor->placement.address, "", actor->spec->max_task_retries});
  } else {
    actor->on_change.push_back([this, id, failed_address, cb = std::move(cb)]() mutable {
      WhenSettled(id, failed_address, std::move(cb));
    });
  }
}

int ActorOwner::MaxTaskRetries(const ObjectId& id) const {
  auto it = actors_.find(id);
  return it == actors_.end() ? 0 : it->second->spec->max_task_retries;
}

void ActorOwner::ForEach(const std::function<void(const OwnedActor&)>& visit) const {
  thread_.Check("ActorOwner");
  for (const auto& [id, actor] : actors_) visit(*actor);
}

}  // namespace lumen::actors
