// CoreWorker, caller side of actors: the runtime half of the ordered actor
// task submitter (lumen/actors/actor_task_submitter.h) — finding an actor
// through its owner (or the head, for a detached actor whose owner is gone),
// channels to actor processes, pushing calls, completing and failing them.
// io thread.
#include "lumen/worker/core_worker.h"

#include "absl/strings/str_cat.h"
#include "core/worker/actor_caller.h"
#include "core/worker/actor_names.h"
#include "core/worker/head_requester.h"
#include "core/worker/task_manager.h"
#include "core/worker/worker_state.h"
#include "lumen/common/logging.h"
#include "lumen/common/proto_util.h"

namespace lumen::runtime {

std::shared_ptr<Connection> CoreWorker::ActorCaller::ChannelConnection(uint64_t channel) const {
  auto it = channels_.find(channel);
  return it == channels_.end() ? nullptr : it->second;
}

void CoreWorker::ActorCaller::DropChannel(uint64_t channel) {
  auto it = channels_.find(channel);
  if (it == channels_.end()) return;
  core_.ReleaseLater(std::move(it->second));
  channels_.erase(it);
}

bool CoreWorker::ActorCaller::ShareLink(const ObjectId& actor, const std::string& address) {
  auto it = links_.find(actor);
  if (it == links_.end()) return false;
  std::shared_ptr<SharedLink> link = it->second.lock();
  if (!link || !link->conn || link->conn->closed() || link->address != address) return false;
  // The link's handlers pass call replies to OnActorTaskReply and report
  // its loss as this channel's too (actor_owner.cc).
  link->channel = link->conn->id();
  channels_[link->channel] = link->conn;
  // Answered from inside, as the submitter allows (nothing follows its call).
  core_.actor_submitter_->OnChannelOpened(actor, address, link->channel);
  return true;
}

void CoreWorker::ActorCaller::OpenChannel(const ObjectId& actor, const std::string& address) {
  if (ShareLink(actor, address)) return;
  CoreWorker* core = &core_;
  AsyncConnectToAddress(
      core_.io_, address, core_.options_.session_dir, core_.options_.timeouts.connect_timeout,
      [this, core, actor, address](absl::StatusOr<Socket> socket) {
        if (core->stopped_) return;  // the socket closes with it
        if (!socket.ok()) {
          core->actor_submitter_->OnChannelOpened(actor, address, socket.status());
          return;
        }
        auto conn = Connection::Create(std::move(*socket), RuntimePeerConnectionOptions());
        uint64_t channel = conn->id();
        conn->Start(
            [core, actor](Connection&, proto::Envelope::Reader msg) {
              if (msg.isTaskReply()) core->OnActorTaskReply(actor, msg.getTaskReply());
            },
            [core, actor, channel](Connection&, const absl::Status&) {
              if (!core->stopped_) core->OnActorChannelLost(actor, channel);
            });
        OutboundConnections::SendPeerHello(*conn);
        channels_[channel] = std::move(conn);
        core->actor_submitter_->OnChannelOpened(actor, address, channel);
      });
}

void CoreWorker::ActorCaller::CloseAll() {
  auto channels = channels_;  // closing reports losses
  for (auto& [id, conn] : channels) conn->Close(absl::CancelledError("shutdown"));
}

void CoreWorker::CreateActorCaller() {
  actor_caller_ = std::make_unique<ActorCaller>(*this);
  actor_submitter_ = std::make_unique<actors::ActorTaskSubmitter>(*actor_caller_);
}

void CoreWorker::CloseActorChannels() { actor_caller_->CloseAll(); }

std::shared_ptr<Connection> CoreWorker::ActorChannelTo(const ObjectId& actor,
                                                       const std::string& address) {
  auto channel = actor_submitter_->OpenChannelOf(actor);
  if (!channel || (!address.empty() && channel->address != address)) return nullptr;
  return actor_caller_->ChannelConnection(channel->id);
}

void CoreWorker::LocateActor(const ObjectId& id, const std::string& owner,
                             const std::string& failed_address) {
  io_checker_.Check("CoreWorker::LocateActor");
  if (owner == listen_address_) {
    actor_owner_->WhenSettled(id, failed_address, [this, id](actors::ActorLocation location) {
      actor_submitter_->OnLocated(id, std::move(location));
    });
    return;
  }
  // The owner's answer comes on the connection the request went out on; a
  // connect that fails (or times out, Timeouts::connect_timeout) is an
  // unreachable owner.
  connections_->WithPeer(owner, [this, id, failed_address](absl::StatusOr<std::shared_ptr<Connection>> conn) {
    if (!conn.ok()) {
      OnActorOwnerUnreachable(id, failed_address,
                              absl::StrCat("the actor's owner is unreachable: ",
                                           conn.status().message()));
      return;
    }
    connections_->SendPeerRequest(
        **conn,
        [&](proto::Envelope::Builder env) {
          auto req = env.initWaitActor();
          req.setActorId(DataOf(id));
          req.setFailedAddress(failed_address);
        },
        [this, id](proto::Envelope::Reader msg) {
          if (!msg.isActorState()) return;
          auto state = msg.getActorState();
          actor_submitter_->OnLocated(
              id, actors::ActorLocation{state.getAlive(), state.getAddress().cStr(),
                                        state.getReason().cStr(),
                                        static_cast<int>(state.getMaxTaskRetries())});
        });
  });
}

void CoreWorker::LookUpDetachedActor(const ObjectId& id,
                                     std::function<void(std::string address)> done) {
  if (options_.head_address.empty()) {
    done("");
    return;
  }
  head_->Call([id](proto::Envelope::Builder env) { env.setLookupActorById(DataOf(id)); },
              [done = std::move(done)](absl::StatusOr<proto::Envelope::Reader> reply) {
                if (!reply.ok()) {
                  LUMEN_LOG(DEBUG) << "cannot look up a detached actor: " << reply.status();
                  done("");
                  return;
                }
                auto entry = ParseActorNameReply(*reply);
                done(entry.ok() ? entry->address : "");
              });
}

void CoreWorker::OnActorOwnerUnreachable(const ObjectId& id, std::string failed_address,
                                         std::string why) {
  // A detached actor outlives its owner: the head knows where it runs.
  LookUpDetachedActor(id, [this, id, failed_address = std::move(failed_address),
                           why = std::move(why)](std::string address) mutable {
    if (!address.empty() && address != failed_address) {
      actor_submitter_->OnLocated(id, actors::ActorLocation{true, std::move(address), "", {}});
      return;
    }
    actor_submitter_->OnLocated(id, actors::ActorLocation{false, "", std::move(why), {}});
  });
}

void CoreWorker::OnActorChannelLost(const ObjectId& id, uint64_t channel) {
  actor_caller_->DropChannel(channel);
  actor_submitter_->OnChannelLost(id, channel);
}

void CoreWorker::OnActorTaskReply(const ObjectId& id, proto::TaskReply::Reader reply) {
  std::unique_ptr<actors::ActorCall> call =
      actor_submitter_->TakeReplied(id, IdFrom<TaskId>(reply.getTaskId()));
  if (!call) return;
  std::unique_ptr<PendingTask> task(static_cast<PendingTask*>(call.release()));
  tasks_->Complete(*task, reply);
  // Not re-run if lost; the lineage notes why (object_recovery.h).
  if (reply.getResult().isStored()) tasks_->KeepLineage(std::move(task));
}

}  // namespace lumen::runtime
