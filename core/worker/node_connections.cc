// CoreWorker: what it asks of node daemons (ours and the ones we lease from)
// and of other owners over its OutboundConnections (outbound_connections.h):
// the driver's last flush, a lost worker's exit cause, lease ends, the lease
// requester's timers; what a node's death means for leases, actors and object
// copies; what another owner's loss means; and what we tell the owners of
// objects we borrow. io thread, but for FlushToNodes and the posting senders.
#include "lumen/worker/core_worker.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <typeinfo>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "core/worker/object_recovery.h"
#include "core/worker/outbound_connections.h"
#include "core/worker/owner_service.h"
#include "core/worker/task_event_flusher.h"
#include "core/worker/worker_state.h"
#include "lumen/common/codec.h"
#include "lumen/common/failure_types.h"
#include "lumen/common/head_client.h"
#include "lumen/common/logging.h"
#include "lumen/common/process.h"
#include "lumen/common/proto_util.h"
#include "lumen/objectstore/fd_passing.h"
#include "lumen/objectstore/object_table.h"

namespace lumen::runtime {

void CoreWorker::FlushToNodes() {
  if (!io_thread_.joinable()) return;
  // Counted down by each node's answer (or its connection failing).
  struct Pending {
    size_t left = 0;  // io thread only (the post below and the answers)
    absl::Notification done;
  };
  auto pending = std::make_shared<Pending>();
  bool posted = PostToIo("worker.flush_to_nodes", [this, pending] {
    if (event_flusher_) event_flusher_->FlushNow();  // queued before the request below
    std::vector<std::shared_ptr<Connection>> nodes;
    if (node_conn_ && !node_conn_->closed()) nodes.push_back(node_conn_);
    // Other nodes where we leased workers: their events and output too.
    for (auto& conn : connections_->RemoteNodes()) nodes.push_back(std::move(conn));
    pending->left = nodes.size();
    if (nodes.empty()) pending->done.Notify();
    for (const auto& node : nodes) {
      connections_->SendNodeRequest(
          *node, [](proto::Envelope::Builder env) {
            env.initWorkerLogs().initQuery().setFlush(true);
          },
          [pending](proto::Envelope::Reader) {
            if (--pending->left == 0) pending->done.Notify();
          });
    }
  });
  if (!posted) return;
  pending->done.WaitForNotificationWithTimeout(
      absl::FromChrono(options_.timeouts.exit_flush_timeout));
}

void CoreWorker::AskWorkerExitCause(const std::shared_ptr<Connection>& node,
                                    const WorkerId& worker,
                                    std::function<void(std::string cause)> done) {
  auto timeout = options_.timeouts.worker_exit_cause_timeout;
  if (!node || node->closed() || worker.IsNil() || timeout.count() <= 0 || stopped_) {
    done("");
    return;
  }
  // Answered by the reply, the deadline or the node's connection closing,
  // whichever comes first; `done` runs once.
  struct State {
    std::function<void(std::string)> done;
    std::unique_ptr<boost::asio::steady_timer> timer;
    uint64_t request_id = 0;
  };
  auto state = std::make_shared<State>();
  state->done = std::move(done);
  auto finish = [state](std::string cause) {
    if (!state->done) return;
    auto done = std::move(state->done);
    state->done = nullptr;
    if (state->timer) state->timer->cancel();
    done(std::move(cause));
  };
  state->request_id = connections_->SendNodeRequest(
      *node,
      [&](proto::Envelope::Builder env) {
        auto query = env.initGetWorkerExit();
        query.setWorkerId(DataOf(worker));
        query.setTimeoutMs(static_cast<uint32_t>(timeout.count()));
      },
      [finish](proto::Envelope::Reader msg) {
        bool known = msg.isWorkerExit() && msg.getWorkerExit().getKnown();
        finish(known ? std::string(msg.getWorkerExit().getCause().cStr()) : std::string());
      });
  if (!state->done) return;  // answered already (the connection was closing)
  // The daemon answers at the same deadline; a little slack lets its answer win.
  state->timer = std::make_unique<boost::asio::steady_timer>(
      io_, timeout + std::chrono::milliseconds(200));
  state->timer->async_wait([this, state, finish](const boost::system::error_code& ec) {
    if (ec || !state->done) return;
    connections_->ForgetNodeRequest(state->request_id);
    finish("");
  });
}

void CoreWorker::OnRemoteNodeDead(const NodeId& node) {
  // Its workers may still be running, but the cluster gave up on them: what
  // they run is retried (or fails) as if they had died.
  absl::Status why = absl::UnavailableError(
      absl::StrCat("node ", node.Hex().substr(0, 12), " was declared dead"));
  std::vector<std::shared_ptr<Connection>> doomed;
  // Leases there: nothing more goes to them (nor to one granted there later);
  // their workers' connections close now, the daemons' with the rest below.
  for (auto& daemon : submitter_->OnNodeDead(node, why)) {
    if (daemon != node_conn_) doomed.push_back(daemon);
  }
  for (auto& channel : OnActorNodeDead(node, why)) doomed.push_back(channel);
  // Requests waiting at that node's daemon are answered by its closing.
  for (auto& conn : connections_->RemoteNodesOf(node)) doomed.push_back(std::move(conn));
  for (auto& conn : doomed) conn->Close(why);
  // Copies there are gone: readers are sent to the others; an object with no
  // copy left is rebuilt from its lineage when its task may run again, else
  // it fails with ObjectLostError (object_recovery.h).
  std::vector<ObjectId> lost;
  {
    ObjectTable::Locked objects(*object_table_);
    for (auto& [id, entry] : *objects) {
      if (!entry.owned || !entry.ready || entry.kind != ObjectEntry::Kind::kStored) continue;
      auto& copies = entry.locations;
      auto before = copies.size();
      copies.erase(std::remove_if(copies.begin(), copies.end(),
                                  [&](const auto& copy) { return copy.first == node; }),
                   copies.end());
      if (copies.empty() && before > 0) lost.push_back(id);
    }
  }
  if (!lost.empty()) {
    recovery_->OnLost(lost, absl::StrCat("its only copy was on node ", node.Hex(), ", which died"),
                      node);
  }
}

void CoreWorker::SendLeaseEnd(const std::shared_ptr<Connection>& node, uint64_t lease_id,
                              bool kill) {
  if (!node || node->closed() || lease_id == 0) return;
  OutMessage out;
  if (kill) {
    out.Init().setKillLease(lease_id);
  } else {
    out.Init().setReturnLease(lease_id);
  }
  node->Send(out.builder());
}

void CoreWorker::NodeLeaseTransport::After(std::chrono::milliseconds delay,
                                           std::function<void()> fn) {
  auto timer = std::make_shared<boost::asio::steady_timer>(core_.io_, delay);
  timer->async_wait(
      [timer, fn = std::move(fn)](const boost::system::error_code&) { fn(); });
}

// ---------------------------------------------------------------------------
// Other owners: their loss, and what we tell them of the objects we borrow.

void CoreWorker::ConnectionsHost::OnOwnerLost(const std::string& address,
                                              const absl::Status& why) {
  // The owner is gone: what we were waiting for from it is lost.
  std::vector<ObjectId> lost;
  {
    ObjectTable::Locked objects(*core_.object_table_);
    for (auto& [id, e] : *objects) {
      if (!e.owned && !e.ready && e.requested && e.owner_address == address) {
        lost.push_back(id);
      }
    }
  }
  for (const auto& orphan : core_.actor_submitter_->LocatingThrough(address)) {
    core_.OnActorOwnerUnreachable(orphan.actor, orphan.failed_address,
                                  absl::StrCat("the actor's owner at ", address,
                                               " died: ", why.message()));
  }
  for (const auto& id : lost) {
    core_.memory_store_->SetFailed(
        id, Failure{proto::FailureKind::OBJECT_LOST, kOwnerDiedErrorType,
                    absl::StrCat("the owner of object ", id.Hex(), " at ", address,
                                 " died: ", why.message()),
                    ""});
  }
}

void CoreWorker::SendEscapeRef(const ObjectId& id, const std::string& owner) {
  // A borrowed ref passed on: the owner pins it for the next reader. Sent on the
  // same connection as (and so before) our own removeBorrower.
  PostToIo("worker.send_escape_ref", [this, id, owner] {
    connections_->WithPeer(owner, [id](absl::StatusOr<std::shared_ptr<Connection>> conn) {
      if (!conn.ok()) return;  // the owner is gone; so is the object
      OutMessage out;
      out.Init().setEscapeRef(DataOf(id));
      (*conn)->Send(out.builder());
    });
  });
}

void CoreWorker::SendBorrowerChange(const ObjectId& id, const std::string& owner, bool add) {
  if (stopped_) return;
  PostToIo("worker.send_borrower_change", [this, id, owner, add] {
    connections_->WithPeer(owner, [id, add](absl::StatusOr<std::shared_ptr<Connection>> conn) {
      if (!conn.ok()) return;  // the owner is gone; so is the object
      OutMessage out;
      auto env = out.Init();
      capnp::Data::Reader data = DataOf(id);
      if (add) {
        env.setAddBorrower(data);
      } else {
        env.setRemoveBorrower(data);
      }
      (*conn)->Send(out.builder());
    });
  });
}

}  // namespace lumen::runtime
