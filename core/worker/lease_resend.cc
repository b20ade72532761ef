// CoreWorker::NodeLeaseTransport: lease requests to node daemons, keyed and
// resent after a failed attempt or a lost reply (worker_state.h;
// doc/reliability.md, item 9). io thread.
#include <capnp/message.h>

#include "core/worker/worker_state.h"
#include "lumen/common/control_retry.h"
#include "lumen/common/fault_injector.h"
#include "lumen/common/proto_util.h"

namespace lumen::runtime {

struct CoreWorker::NodeLeaseTransport::Keyed {
  capnp::MallocMessageBuilder message;
  uint64_t request_id = 0;
  int attempt = 0;  // of the attempt being sent, 0 first
  std::shared_ptr<std::function<bool(proto::Envelope::Reader)>> on_reply;
};

namespace {

// What the lease requester takes for "the node went away before answering".
void NodeGone(const std::function<bool(proto::Envelope::Reader)>& on_reply) {
  capnp::MallocMessageBuilder empty;
  on_reply(empty.initRoot<proto::Envelope>().asReader());
}

}  // namespace

void CoreWorker::NodeLeaseTransport::SendLeaseRequest(
    const std::string& target, const LeaseShape& shape, bool grant_or_reject,
    std::function<bool(proto::Envelope::Reader)> on_reply, SentCallback on_sent) {
  if (core_.stopped_) {
    on_sent(absl::CancelledError("shutting down"));
    return;
  }
  core_.connections_->WithNode(target, [this, shape, grant_or_reject, on_reply = std::move(on_reply),
                          on_sent = std::move(on_sent)](
                             absl::StatusOr<std::shared_ptr<Connection>> conn) mutable {
    if (!conn.ok() || !*conn || (*conn)->closed()) {
      on_sent(absl::UnavailableError(conn.ok() ? "" : conn.status().message()));
      return;
    }
    std::shared_ptr<Connection> node = *std::move(conn);
    auto keyed = std::make_shared<Keyed>();
    keyed->request_id = core_.connections_->NextRequestId();
    keyed->on_reply =
        std::make_shared<std::function<bool(proto::Envelope::Reader)>>(std::move(on_reply));
    auto env = keyed->message.initRoot<proto::Envelope>();
    env.setRequestId(keyed->request_id);
    auto lease = env.initRequestLease();
    SetResources(lease.initResources(shape.resources.size()), shape.resources);
    SetResources(lease.initPlacement(shape.placement.size()), shape.placement);
    lease.setActor(shape.actor);
    lease.setDetached(shape.detached);
    lease.setStrategy(static_cast<proto::SchedulingKind>(shape.scheduling.kind));
    if (!shape.scheduling.node.IsNil()) lease.setAffinityNode(DataOf(shape.scheduling.node));
    lease.setAffinitySoft(shape.scheduling.soft);
    lease.setGrantOrReject(grant_or_reject);
    if (!shape.scheduling.placement_group.empty()) {
      lease.setPlacementGroup(BytesOf(shape.scheduling.placement_group));
    }
    lease.setBundleIndex(shape.scheduling.bundle_index);
    lease.setName(shape.name);
    lease.setRetriable(shape.retriable);
    SetRetryKey(env);
    SendKeyed(keyed, node);
    on_sent(std::move(node));
  });
}

void CoreWorker::NodeLeaseTransport::SendKeyed(const std::shared_ptr<Keyed>& keyed,
                                               const std::shared_ptr<Connection>& node) {
  auto env = keyed->message.getRoot<proto::Envelope>();
  SetRetryAttempt(env, static_cast<uint32_t>(keyed->attempt));
  InjectedFault fault = InjectedFault::kNone;
  if (FaultInjector::Active() && keyed->attempt + 1 < kControlAttempts) {
    fault = FaultInjector::Draw(env.asReader());
  }
  if (fault == InjectedFault::kFailBeforeSend) {
    // Nothing written: the same request again after the backoff.
    ++keyed->attempt;
    std::weak_ptr<Connection> weak = node;
    After(ControlRetryBackoff(keyed->attempt), [this, keyed, weak] {
      auto node = weak.lock();
      if (!node || node->closed() || core_.stopped_) return NodeGone(*keyed->on_reply);
      SendKeyed(keyed, node);
    });
    return;
  }
  core_.connections_->ExpectNodeReply(
      keyed->request_id, node->id(),
      Receive(keyed, node, node->id(), fault != InjectedFault::kNone));
  node->Send(keyed->message);
}

std::function<void(proto::Envelope::Reader)> CoreWorker::NodeLeaseTransport::Receive(
    const std::shared_ptr<Keyed>& keyed, std::weak_ptr<Connection> node, uint64_t conn_id,
    bool drop) {
  return [this, keyed, node = std::move(node), conn_id, drop](proto::Envelope::Reader msg) {
    const bool answer = msg.isLeaseReply() && !msg.getLeaseReply().getWaiting();
    if (drop && answer) {
      // The injected loss: this answer never arrived. Ask again (same key).
      ++keyed->attempt;
      auto conn = node.lock();
      if (!conn || conn->closed() || core_.stopped_) return NodeGone(*keyed->on_reply);
      SendKeyed(keyed, conn);
      return;
    }
    // A "waiting" note: the answer comes later under the same request id.
    if ((*keyed->on_reply)(msg)) {
      core_.connections_->ExpectNodeReply(msg.getRequestId(), conn_id,
                                          Receive(keyed, node, conn_id, drop));
    }
  };
}

}  // namespace lumen::runtime
