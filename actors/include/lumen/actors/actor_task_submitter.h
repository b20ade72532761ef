// The caller side of actors: one ordered queue of calls per actor, the calls in
// flight, and what happens to them when the actor's process goes away
// (resent to the next incarnation up to max_task_retries, or failed).
//
//   ActorTaskSubmitter submitter(transport);       // transport: ActorCallTransport
//   submitter.Submit(actor, owner, std::move(call));
//   call_ptr->resolved = true;                     // its arguments are ready
//   submitter.OnCallResolved(actor);               // -> transport.Locate(...)
//   submitter.OnLocated(actor, {.alive = true, .address = a});  // -> OpenChannel
//   submitter.OnChannelOpened(actor, a, channel);                // -> Push
//   auto done = submitter.TakeReplied(actor, task_id);          // the reply came
//
// Invariant: the calls of one actor leave in sequence order, each call at most
// once per channel; after a channel is lost, its unanswered calls go first to
// the next one, in their order (or fail when out of retries).
//
// Only on its owner's thread (the runtime's io thread); not thread-safe.
#pragma once

#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "lumen/actors/actor_call.h"
#include "lumen/actors/actor_runtime.h"
#include "lumen/common/ids.h"

namespace lumen::actors {

class ActorTaskSubmitter {
 public:
  // `transport` outlives the submitter.
  explicit ActorTaskSubmitter(ActorCallTransport& transport) : transport_(transport) {}
  ActorTaskSubmitter(const ActorTaskSubmitter&) = delete;
  ActorTaskSubmitter& operator=(const ActorTaskSubmitter&) = delete;

  // Queues `call` for `actor` (owned by the process at `owner`) and numbers it.
  // It goes out once it is resolved and every call before it has gone.
  // Returns the call, which stays owned by the submitter until it is replied
  // to or handed to ActorCallTransport::Fail.
  ActorCall* Submit(const ObjectId& actor, const std::string& owner,
                    std::unique_ptr<ActorCall> call);
  // A call of `actor` was marked resolved (or got a dep_failure): sends what
  // can go, asking where the actor is first when no channel is open.
  void OnCallResolved(const ObjectId& actor);
  // The answer to ActorCallTransport::Locate: an address opens a channel
  // (calls keep waiting, in order), a death fails the calls.
  void OnLocated(const ObjectId& actor, ActorLocation location);
  // The answer to ActorCallTransport::OpenChannel for `address`: the channel
  // (interrupted calls, then the queue, go over it) or its error (the actor is
  // located again, at an address other than this one).
  void OnChannelOpened(const ObjectId& actor, const std::string& address,
                       absl::StatusOr<uint64_t> channel);
  // `channel` of `actor` closed: its unanswered calls wait for the next
  // incarnation (or fail), and the actor is located again.
  void OnChannelLost(const ObjectId& actor, uint64_t channel);
  // The reply to `task` arrived: the call, for the runtime to complete, or null
  // when it is not (or no longer) in flight.
  std::unique_ptr<ActorCall> TakeReplied(const ObjectId& actor, const TaskId& task);
  // The actor is dead for this caller (Kill(no_restart)): calls submitted from
  // now on fail.
  void MarkDead(const ObjectId& actor, std::string why);

  // The actors being located through the owner at `owner` (when it dies, the
  // runtime answers for them), each with the address that failed last.
  struct Locating {
    ObjectId actor;
    std::string failed_address;
    bool operator==(const Locating&) const = default;
  };
  std::vector<Locating> LocatingThrough(const std::string& owner) const;
  // The open channel to `actor` and the address it goes to, if any.
  struct Channel {
    uint64_t id = 0;
    std::string address;
  };
  std::optional<Channel> OpenChannelOf(const ObjectId& actor) const;
  // Every call not finished, for `lumen list tasks`.
  void ForEachCall(
      const std::function<void(const ActorCall& call, bool in_flight)>& visit) const;
  // For tests: actors with state held (dead ones with nothing left are dropped).
  size_t TEST_ActorCount() const { return actors_.size(); }

 private:
  struct PerActor {
    ObjectId id;
    std::string owner;
    std::string address;         // where the open channel goes
    std::string failed_address;  // the last address that stopped answering
    uint64_t channel = 0;        // 0: none open
    bool locating = false;
    bool opening = false;  // a channel is being opened
    bool dead = false;
    std::string death;
    int max_task_retries = 0;
    uint64_t next_sequence = 1;
    std::deque<std::unique_ptr<ActorCall>> queue;  // sequence order, not sent
    absl::flat_hash_map<TaskId, std::unique_ptr<ActorCall>> in_flight;
    std::deque<TaskId> sent_order;  // in-flight ids in the order sent
    std::vector<std::unique_ptr<ActorCall>> interrupted;  // in flight when it went away
  };

  PerActor& Get(const ObjectId& actor, const std::string& owner);
  void Pump(PerActor& actor);
  void FailAll(PerActor& actor);
  void Locate(PerActor& actor);
  // Drops a dead actor's state once no call of it is left (keeps its death).
  void MaybeForget(const ObjectId& actor);

  ActorCallTransport& transport_;
  absl::flat_hash_map<ObjectId, std::unique_ptr<PerActor>> actors_;
  // Dead actors whose state was dropped: later calls to them fail at once.
  // The last kRememberedDeaths only (oldest first in death_order_): a call to
  // an older one asks its owner, who says it is dead.
  static constexpr size_t kRememberedDeaths = 4096;
  absl::flat_hash_map<ObjectId, std::string> deaths_;
  std::deque<ObjectId> death_order_;
};

}  // namespace lumen::actors
