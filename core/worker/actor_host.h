// CoreWorker::ActorHost: what the owner-side actor manager
// (lumen/actors/actor_owner.h) asks of this runtime — workers leased through
// the lease requester, links to actor processes (connected without blocking,
// then the creation task pushed), and the head's name directory. Internal to
// core/worker; io thread only.
#pragma once

#include <memory>
#include <string>

#include "core/worker/worker_state.h"
#include "lumen/actors/actor_owner.h"
#include "lumen/actors/actor_owner_runtime.h"
#include "lumen/worker/core_worker.h"

namespace lumen::runtime {

class CoreWorker::ActorHost final : public actors::ActorLeaser,
                                    public actors::ActorProcessStarter,
                                    public actors::ActorNameRecorder {
 public:
  // `core` outlives the host (it owns it).
  explicit ActorHost(CoreWorker& core) : core_(core) {}

  // Asks the lease requester; Unavailable when the node daemon is gone.
  [[nodiscard]] absl::Status RequestWorker(const actors::ActorSpec& actor,
                                           int generation) override;
  // Connects within Timeouts::connect_timeout, then says hello and pushes the
  // creation task (built now, from the record's arguments).
  std::unique_ptr<actors::ActorProcess> StartProcess(const actors::ActorSpec& actor,
                                                     int generation,
                                                     const actors::WorkerPlacement& where,
                                                     uint32_t attempt) override;
  void ReleaseCreation(actors::ActorSpec& actor) override;
  void RecordAddress(const actors::ActorSpec& actor, const std::string& address) override;
  void ReleaseName(const actors::ActorSpec& actor) override;

 private:
  class NodeWorkerLease;  // actors::LeasedWorker over a node connection
  class ProcessLink;      // actors::ActorProcess over a connection to the actor

  CoreWorker& core_;
};

}  // namespace lumen::runtime
