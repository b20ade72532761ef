#include "lumen/actors/actor_task_submitter.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace lumen::actors {

ActorTaskSubmitter::PerActor& ActorTaskSubmitter::Get(const ObjectId& actor,
                                                       const std::string& owner) {
  auto& slot = actors_[actor];
  if (!slot) {
    slot = std::make_unique<PerActor>();
    slot->id = actor;
    slot->owner = owner;
    if (auto it = deaths_.find(actor); it != deaths_.end()) {
      slot->dead = true;
      slot->death = it->second;
    }
  }
  return *slot;
}

ActorCall* ActorTaskSubmitter::Submit(const ObjectId& actor, const std::string& owner,
                                      std::unique_ptr<ActorCall> call) {
  PerActor& a = Get(actor, owner);
  call->sequence = a.next_sequence++;
  ActorCall* raw = call.get();
  a.queue.push_back(std::move(call));
  return raw;
}

void ActorTaskSubmitter::OnCallResolved(const ObjectId& actor) {
  auto it = actors_.find(actor);
  if (it != actors_.end()) Pump(*it->second);
}

void ActorTaskSubmitter::FailAll(PerActor& a) {
  TaskFailure failure{proto::FailureKind::ACTOR_DIED, "lumen::ActorDiedError",
                      absl::StrCat("the actor ", a.id.Hex().substr(0, 12), " is dead: ", a.death),
                      ""};
  auto interrupted = std::move(a.interrupted);
  a.interrupted.clear();
  for (auto& call : interrupted) {
    // It was running when the actor died: say so, with the cause.
    TaskFailure running = failure;
    running.message = absl::StrCat("the actor ", a.id.Hex().substr(0, 12), " died while running ",
                                   call->function, ": ", a.death);
    transport_.Fail(std::move(call), std::move(running));
  }
  for (auto it = a.queue.begin(); it != a.queue.end();) {
    if ((*it)->resolved) {
      std::unique_ptr<ActorCall> call = std::move(*it);
      it = a.queue.erase(it);
      transport_.Fail(std::move(call), failure);
    } else {
      // Its arguments' callbacks still point at it: fail its result now and
      // let it go when they have run (OnCallResolved pumps again).
      transport_.FailResult(**it, failure);
      ++it;
    }
  }
}

void ActorTaskSubmitter::Pump(PerActor& a) {
  if (a.dead) {
    FailAll(a);
    MaybeForget(a.id);
    return;
  }
  if (a.channel == 0) {
    if (!a.locating && !a.opening) Locate(a);
    return;
  }
  while (!a.queue.empty() && a.queue.front()->resolved) {
    std::unique_ptr<ActorCall> call = std::move(a.queue.front());
    a.queue.pop_front();
    if (call->dep_failure) {
      TaskFailure failure = *call->dep_failure;
      transport_.Fail(std::move(call), std::move(failure));
      continue;
    }
    transport_.Push(a.channel, *call);
    a.sent_order.push_back(call->task_id);
    TaskId id = call->task_id;
    a.in_flight.emplace(id, std::move(call));
  }
}

void ActorTaskSubmitter::Locate(PerActor& a) {
  a.locating = true;
  // May answer from inside: nothing of `a` is touched after this.
  transport_.Locate(a.id, a.owner, a.failed_address);
}

void ActorTaskSubmitter::OnLocated(const ObjectId& actor, ActorLocation location) {
  auto it = actors_.find(actor);
  if (it == actors_.end()) return;
  PerActor& a = *it->second;
  a.locating = false;
  if (location.max_task_retries) a.max_task_retries = *location.max_task_retries;
  if (!location.alive) {
    a.dead = true;
    a.death = std::move(location.death);
    Pump(a);
    return;
  }
  a.opening = true;
  transport_.OpenChannel(actor, location.address);
}

void ActorTaskSubmitter::OnChannelOpened(const ObjectId& actor, const std::string& address,
                                         absl::StatusOr<uint64_t> channel) {
  auto it = actors_.find(actor);
  if (it == actors_.end()) return;
  PerActor& a = *it->second;
  a.opening = false;
  if (!channel.ok() && channel.status().code() == absl::StatusCode::kResourceExhausted) {
    // This process cannot open a connection (out of file descriptors): the
    // actor is not the one gone, and asking where it moved would wait for
    // ever. The calls that could go now fail with why; a later call tries
    // to open the channel again.
    TaskFailure failure{proto::FailureKind::OTHER, "lumen::Error",
                        absl::StrCat("cannot open a channel to the actor ",
                                     actor.Hex().substr(0, 12), ": ", channel.status().message()),
                        ""};
    for (auto qit = a.queue.begin(); qit != a.queue.end();) {
      if (!(*qit)->resolved) {
        ++qit;
        continue;
      }
      std::unique_ptr<ActorCall> call = std::move(*qit);
      qit = a.queue.erase(qit);
      transport_.Fail(std::move(call), failure);
    }
    return;
  }
  if (!channel.ok()) {
    // Gone already: ask again, for an address other than this one.
    a.failed_address = address;
    Locate(a);
    return;
  }
  a.address = address;
  a.channel = *channel;
  // Calls that were running when the previous incarnation died go first, in
  // their order, if the actor allows a retry; otherwise they fail.
  std::vector<std::unique_ptr<ActorCall>> interrupted = std::move(a.interrupted);
  a.interrupted.clear();
  for (auto rit = interrupted.rbegin(); rit != interrupted.rend(); ++rit) {
    auto& call = *rit;
    // max_task_retries -1: resent after every restart.
    if (a.max_task_retries < 0 || static_cast<int>(call->attempt) < a.max_task_retries) {
      ++call->attempt;
      call->resolved = true;
      a.queue.push_front(std::move(call));
    } else {
      transport_.Fail(
          std::move(call),
          TaskFailure{proto::FailureKind::ACTOR_DIED, "lumen::ActorDiedError",
                      absl::StrCat("the actor ", actor.Hex().substr(0, 12),
                                   " died while running this call and was restarted; the call "
                                   "was not retried (max_task_retries=",
                                   a.max_task_retries, ")"),
                      ""});
    }
  }
  Pump(a);
}

void ActorTaskSubmitter::OnChannelLost(const ObjectId& actor, uint64_t channel) {
  auto it = actors_.find(actor);
  if (it == actors_.end()) return;
  PerActor& a = *it->second;
  if (a.channel != channel || channel == 0) return;
  a.channel = 0;
  a.failed_address = a.address;
  for (const TaskId& task_id : a.sent_order) {
    auto fit = a.in_flight.find(task_id);
    if (fit == a.in_flight.end()) continue;
    a.interrupted.push_back(std::move(fit->second));
    a.in_flight.erase(fit);
  }
  a.sent_order.clear();
  if (!a.locating && !a.opening) Locate(a);
}

std::unique_ptr<ActorCall> ActorTaskSubmitter::TakeReplied(const ObjectId& actor,
                                                           const TaskId& task) {
  auto it = actors_.find(actor);
  if (it == actors_.end()) return nullptr;
  PerActor& a = *it->second;
  auto fit = a.in_flight.find(task);
  if (fit == a.in_flight.end()) return nullptr;
  std::unique_ptr<ActorCall> call = std::move(fit->second);
  a.in_flight.erase(fit);
  while (!a.sent_order.empty() && !a.in_flight.contains(a.sent_order.front())) {
    a.sent_order.pop_front();
  }
  if (a.dead) MaybeForget(actor);
  return call;
}

void ActorTaskSubmitter::MarkDead(const ObjectId& actor, std::string why) {
  auto it = actors_.find(actor);
  if (it == actors_.end() || it->second->dead) return;
  it->second->dead = true;
  it->second->death = std::move(why);
}

void ActorTaskSubmitter::MaybeForget(const ObjectId& actor) {
  auto it = actors_.find(actor);
  if (it == actors_.end()) return;
  PerActor& a = *it->second;
  if (!a.dead || !a.queue.empty() || !a.in_flight.empty() || !a.interrupted.empty()) return;
  if (a.channel != 0 || a.opening) return;  // its loss or channel is still to be reported
  if (deaths_.insert_or_assign(actor, std::move(a.death)).second) {
    death_order_.push_back(actor);
    if (death_order_.size() > kRememberedDeaths) {
      deaths_.erase(death_order_.front());
      death_order_.pop_front();
    }
  }
  actors_.erase(it);
}

std::vector<ActorTaskSubmitter::Locating> ActorTaskSubmitter::LocatingThrough(
    const std::string& owner) const {
  std::vector<Locating> out;
  for (const auto& [id, a] : actors_) {
    if (a->locating && a->owner == owner) out.push_back({id, a->failed_address});
  }
  return out;
}

std::optional<ActorTaskSubmitter::Channel> ActorTaskSubmitter::OpenChannelOf(
    const ObjectId& actor) const {
  auto it = actors_.find(actor);
  if (it == actors_.end() || it->second->channel == 0) return std::nullopt;
  return Channel{it->second->channel, it->second->address};
}

void ActorTaskSubmitter::ForEachCall(
    const std::function<void(const ActorCall& call, bool in_flight)>& visit) const {
  for (const auto& [id, a] : actors_) {
    for (const auto& [task_id, call] : a->in_flight) visit(*call, true);
    for (const auto& call : a->queue) visit(*call, false);
  }
}

}  // namespace lumen::actors
