// CoreWorker::ActorCaller: the ActorCallTransport that the ordered actor task
// submitter (lumen/actors/actor_task_submitter.h) sends through — CoreWorker's
// connections to actor processes, opened without blocking. Internal to
// core/worker; io thread only.
#pragma once

#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "core/worker/task_manager.h"
#include "core/worker/worker_state.h"
#include "lumen/actors/actor_runtime.h"
#include "lumen/common/proto_util.h"
#include "lumen/common/task_events.h"
#include "lumen/worker/core_worker.h"

namespace lumen::runtime {

class CoreWorker::ActorCaller final : public actors::ActorCallTransport {
 public:
  // `core` outlives the caller (it owns it).
  explicit ActorCaller(CoreWorker& core) : core_(core) {}

  void Locate(const ObjectId& actor, const std::string& owner,
              const std::string& failed_address) override {
    core_.LocateActor(actor, owner, failed_address);
  }

  // Connects within Timeouts::connect_timeout without blocking the io thread;
  // answers actor_submitter_->OnChannelOpened from the connect's callback.
  void OpenChannel(const ObjectId& actor, const std::string& address) override;

  void Push(uint64_t channel, const actors::ActorCall& call) override {
    auto it = channels_.find(channel);
    if (it == channels_.end()) return;  // closed: its loss is being reported
    OutMessage out;
    core_.FillTaskSpec(out.Init().initPushTask(), static_cast<const PendingTask&>(call));
    // An actor call has no lease: "granted" is when it goes to the actor
    // (folded into FINISHED/FAILED: TaskManager).
    static_cast<const PendingTask&>(call).lease_tick = TaskEvents().Tick();
    it->second->Send(out.builder());
  }

  void Fail(std::unique_ptr<actors::ActorCall> call, actors::TaskFailure failure) override {
    core_.tasks_->Fail(std::unique_ptr<PendingTask>(static_cast<PendingTask*>(call.release())),
                      std::move(failure));
  }

  void FailResult(const actors::ActorCall& call, const actors::TaskFailure& failure) override {
    core_.memory_store_->SetFailed(static_cast<const PendingTask&>(call).return_id, failure);
  }

  // The connection an owner opened to an actor process it created (to push
  // the creation and watch the process). Calls to that actor from this
  // process go over it too, instead of over a second connection: an owner
  // of 10,000 actors holds 10,000 descriptors, not 20,000.
  struct SharedLink {
    std::shared_ptr<Connection> conn;
    std::string address;   // the actor process's
    uint64_t channel = 0;  // conn's id once calls go over it (0: not yet)
  };
  // The owner's link to `actor` is open (replacing an earlier incarnation's).
  void AddLink(const ObjectId& actor, const std::shared_ptr<SharedLink>& link) {
    links_[actor] = link;
  }
  // The link closed: forget it unless a newer incarnation's replaced it.
  void ForgetLink(const ObjectId& actor, const SharedLink* link) {
    auto it = links_.find(actor);
    if (it == links_.end()) return;
    auto current = it->second.lock();
    if (!current || current.get() == link) links_.erase(it);
  }

  // The connection of an open channel, or null.
  std::shared_ptr<Connection> ChannelConnection(uint64_t channel) const;
  // A channel ended: forget its connection (freed once its handlers returned).
  void DropChannel(uint64_t channel);
  // Shutdown: closes every channel.
  void CloseAll();

 private:
  // Opens the channel over the owner's link to `actor` at `address` when
  // there is one; false when there is none.
  bool ShareLink(const ObjectId& actor, const std::string& address);

  CoreWorker& core_;
  absl::flat_hash_map<uint64_t, std::shared_ptr<Connection>> channels_;
  // The links of the actors this process created, by actor (weak: the link
  // owns them; ForgetLink erases closed ones).
  absl::flat_hash_map<ObjectId, std::weak_ptr<SharedLink>> links_;
};

}  // namespace lumen::runtime
