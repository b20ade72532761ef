// CoreWorker's private state types and helpers, shared by its .cc files.
// Internal to core/worker.
#pragma once

#include <sched.h>

#include <deque>
#include <optional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "core/worker/lease_requester.h"
#include "core/worker/lost_copies.h"
#include "core/worker/memory_store.h"
#include "core/worker/normal_task_submitter.h"
#include "core/worker/object_value.h"
#include "core/worker/outbound_connections.h"
#include "core/worker/owner_service.h"
#include "core/worker/object_table.h"
#include "core/worker/pending_task.h"
#include "core/worker/reference_counter.h"
#include "core/worker/store_provider.h"
#include "core/worker/task_receiver.h"
#include "lumen/common/proto_util.h"
#include "lumen/worker/core_worker.h"

namespace lumen::runtime {


inline std::string SchedulingKey(const internal::SchedulingOptions& s) {
  if (s.kind == internal::SchedulingOptions::Kind::kDefault && s.placement_group.empty()) return "";
  return absl::StrCat("|", static_cast<int>(s.kind), ":", s.node.Hex(), ":", s.soft, ":",
                      s.placement_group, ":", s.bundle_index);
}

// Spin briefly before blocking: a cross-CPU wake-up costs tens of microseconds,
// and most task round trips finish within that.
// The spinning thread yields its CPU between checks: on a machine with few cores
// the thread it waits for (an io thread, the other process) may need that CPU.
template <class Pred>
bool SpinFor(std::chrono::microseconds budget, Pred ready) {
  auto deadline = std::chrono::steady_clock::now() + budget;
  int i = 0;
  while (!ready()) {
    if ((++i & 15) == 0) {
      if (std::chrono::steady_clock::now() >= deadline) return false;
      sched_yield();
    }
#if defined(__x86_64__)
    __builtin_ia32_pause();
#endif
  }
  return true;
}

// The LeaseTransport of lease_requester_: our node connections and the io
// thread's timers. Each lease request carries a retry key (doc/reliability.md,
// item 9): an attempt that failed before it was sent, or whose reply was lost,
// is sent again with the same key and request id on the same connection, and
// the node answers a repeat with its first reply (core/node/keyed_requests.h),
// so one request gets one lease. io thread only.
class CoreWorker::NodeLeaseTransport final : public LeaseTransport {
 public:
  // `core` outlives the transport (it owns it).
  explicit NodeLeaseTransport(CoreWorker& core) : core_(core) {}
  bool LocalNodeConnected() override { return core_.node_conn_ && !core_.node_conn_->closed(); }
  void SendLeaseRequest(const std::string& target, const LeaseShape& shape,
                        bool grant_or_reject, std::function<bool(proto::Envelope::Reader)> on_reply,
                        SentCallback on_sent) override;
  void OnSpillback(const std::string& address, const NodeId& node) override {
    core_.connections_->RecordNodeId(address, node);
  }
  void After(std::chrono::milliseconds delay, std::function<void()> fn) override;

 private:
  // One lease request: its message (key and request id the same on every
  // attempt), the attempts made, and where its replies go.
  struct Keyed;
  // Sends the next attempt of `keyed` on `node` (lease_resend.cc). With fault
  // injection (LUMEN_FAULT_INJECT="requestLease:..."): fail_before_send sends
  // it again after ControlRetryBackoff; drop_reply (and fail_in_flight: the
  // node connection is not dropped, that would be the node's loss) throws the
  // node's final reply away and sends it again at once. At most
  // kControlAttempts - 1 attempts of one request are broken.
  void SendKeyed(const std::shared_ptr<Keyed>& keyed, const std::shared_ptr<Connection>& node);
  // A node-request callback for `keyed`: hands each reply to its on_reply,
  // re-registered for the next one while that returns true (a "waiting"
  // note); with `drop`, a final reply is thrown away and the request resent.
  std::function<void(proto::Envelope::Reader)> Receive(const std::shared_ptr<Keyed>& keyed,
                                                       std::weak_ptr<Connection> node,
                                                       uint64_t conn_id, bool drop);

  CoreWorker& core_;
};

// The OwnerServiceHost of owner_service_: the runtime's side of what peers
// ask (object copies, actor identity). io thread only.
class CoreWorker::ServiceHost final : public OwnerServiceHost {
 public:
  // `core` outlives the host (it owns it).
  explicit ServiceHost(CoreWorker& core) : core_(core) {}
  bool Post(const char* name, std::function<void()> fn) override {
    return core_.PostToIo(name, std::move(fn));
  }
  void OnObjectLocationAdded(const ObjectId& id, const NodeId& node,
                             const std::string& address) override {
    core_.memory_store_->AddLocation(id, node, address);
  }
  void OnCopyUnreadable(const ObjectId& id, const NodeId& node, const std::string& why) override {
    core_.lost_copies_->OnCopyUnreadable(id, node, why);
  }
  // executor_host.cc: the actor process's identity and its end.
  void OnKillUnowned(const ObjectId& id) override;
  void OnBecomeActor(Connection& owner, const ObjectId& id, std::string name) override;

 private:
  CoreWorker& core_;
};

// The OutboundConnectionsHost of connections_: frames that are not replies
// (node daemons' to OnNodeFrame, owners' to the owner service) and the loss
// of another owner (node_connections.cc). io thread only.
class CoreWorker::ConnectionsHost final : public OutboundConnectionsHost {
 public:
  // `core` outlives the host (it owns it).
  explicit ConnectionsHost(CoreWorker& core) : core_(core) {}
  bool Stopped() const override { return core_.stopped_; }
  void OnNodeFrame(Connection& conn, proto::Envelope::Reader msg) override {
    core_.OnNodeFrame(conn, msg);
  }
  void OnPeerFrame(Connection& conn, proto::Envelope::Reader msg) override {
    core_.owner_service_->OnFrame(conn, msg);
  }
  void OnOwnerLost(const std::string& address, const absl::Status& why) override;

 private:
  CoreWorker& core_;
};

// The NormalTaskTransport of submitter_: leased workers' connections (opened
// with AsyncConnectToAddress), our node connections, the io thread's timers.
// io thread only.
class CoreWorker::SubmitterTransport final : public NormalTaskTransport {
 public:
  // `core` outlives the transport (it owns it).
  explicit SubmitterTransport(CoreWorker& core) : core_(core) {}
  bool LocalNodeConnected() override { return core_.node_conn_ && !core_.node_conn_->closed(); }
  void ConnectWorker(const std::string& address, WorkerHandlers handlers,
                     ConnectDone done) override;
  void EndLease(const std::shared_ptr<Connection>& node, uint64_t lease_id, bool kill) override {
    core_.SendLeaseEnd(node, lease_id, kill);
  }
  void AskWorkerExitCause(const std::shared_ptr<Connection>& node, const WorkerId& worker,
                          std::function<void(std::string cause)> done) override {
    core_.AskWorkerExitCause(node, worker, std::move(done));
  }
  std::unique_ptr<OneShotTimer> NewTimer() override;
  void Post(const char* name, std::function<void()> fn) override {
    core_.PostToIo(name, std::move(fn));
  }

 private:
  class Worker;  // a LeasedWorker over a Connection
  class Timer;   // a OneShotTimer over a steady_timer
  CoreWorker& core_;
};

}  // namespace lumen::runtime
