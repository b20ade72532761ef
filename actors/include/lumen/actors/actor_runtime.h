// What the actor logic needs from the runtime, as small interfaces that
// core/worker implements (and tests fake).
//
//   class Transport : public actors::ActorCallTransport { ... };  // in core/worker
//   actors::ActorTaskSubmitter submitter(transport);
//
// Every method is called on the submitter's thread (the runtime's io thread),
// and answers come back to the submitter on that thread too.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "lumen/actors/actor_call.h"
#include "lumen/common/ids.h"

namespace lumen::actors {

// Caller side: find an actor, open a channel to its process, push calls over
// it, and end calls that fail.
class ActorCallTransport {
 public:
  virtual ~ActorCallTransport() = default;

  // Asks where `actor` (owned by the process at `owner`) runs now, at an
  // address other than `failed_address` ("" for any). The runtime answers once
  // with ActorTaskSubmitter::OnLocated, now or later.
  virtual void Locate(const ObjectId& actor, const std::string& owner,
                      const std::string& failed_address) = 0;
  // Opens a channel to the actor's process at `address` without blocking. The
  // runtime answers once with ActorTaskSubmitter::OnChannelOpened (the
  // channel's id, never 0, or why it cannot be reached), never from inside
  // this call, and reports the channel's end with OnChannelLost.
  virtual void OpenChannel(const ObjectId& actor, const std::string& address) = 0;
  // Sends `call` over `channel` (frames on one channel arrive in order).
  virtual void Push(uint64_t channel, const ActorCall& call) = 0;
  // The call ends with `failure`: the runtime fails its result and frees it.
  virtual void Fail(std::unique_ptr<ActorCall> call, TaskFailure failure) = 0;
  // The call's result fails now, but the call stays queued (its arguments are
  // still being resolved); it is Fail()ed again once they are.
  virtual void FailResult(const ActorCall& call, const TaskFailure& failure) = 0;
};

}  // namespace lumen::actors
