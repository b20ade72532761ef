// CoreWorker: connections and requests to node daemons (ours and the ones we
// lease from), the transport of the lease requester (lease_requester.h), and
// what a node's death means for leases, actors and object copies; the
// connections we open to other processes' owner services, and what we tell
// the owners of objects we borrow. io thread.
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
#include "core/worker/owner_service.h"
#include "core/worker/task_event_flusher.h"
#include "core/worker/worker_state.h"
#include "lumen/common/codec.h"
#include "lumen/common/failure_types.h"
#include "lumen/common/head_client.h"
#include "lumen/common/logging.h"
#include "lumen/common/process.h"
#include "lumen/common/proto_util.h"
#include "lumen/errors.h"
#include "lumen/objectstore/fd_passing.h"
#include "lumen/objectstore/object_table.h"

namespace lumen::runtime {

uint64_t CoreWorker::SendNodeRequest(Connection& conn,
                                     const std::function<void(proto::Envelope::Builder)>& fill,
                                     std::function<void(proto::Envelope::Reader)> callback) {
  io_checker_.Check("CoreWorker::SendNodeRequest");
  uint64_t request_id = next_request_id_++;
  node_requests_[request_id] = NodeRequest{conn.id(), std::move(callback)};
  OutMessage out;
  auto env = out.Init();
  env.setRequestId(request_id);
  fill(env);
  conn.Send(out.builder());
  return request_id;
}

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
    for (const auto& [address, conn] : remote_nodes_) {
      if (conn && !conn->closed()) nodes.push_back(conn);
    }
    pending->left = nodes.size();
    if (nodes.empty()) pending->done.Notify();
    for (const auto& node : nodes) {
      SendNodeRequest(
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
  state->request_id = SendNodeRequest(
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
    node_requests_.erase(state->request_id);
    finish("");
  });
}

void CoreWorker::WithNode(const std::string& address, ConnectionUse use) {
  io_checker_.Check("CoreWorker::WithNode");
  if (address.empty() || address == node_address_) {
    if (node_conn_) {
      use(node_conn_);
    } else {
      use(absl::UnavailableError("not connected to the node daemon"));
    }
    return;
  }
  WithConnection(connecting_nodes_, remote_nodes_, address, std::move(use), &CoreWorker::AdoptNode);
}

std::shared_ptr<Connection> CoreWorker::AdoptNode(const std::string& address, Socket socket) {
  auto conn = Connection::Create(std::move(socket));
  conn->Start([this](Connection& c, proto::Envelope::Reader m) { OnNodeFrame(c, m); },
              [this](Connection& c, const absl::Status& why) { OnRemoteNodeLost(c, why); });
  OutMessage out;
  auto hello = InitHello(out.Init(), proto::Role::REMOTE_OWNER);
  hello.setWorkerId(DataOf(options_.worker_id));
  hello.setJobId(DataOf(options_.job_id));
  hello.setExePath(exe_path_);
  hello.setListenAddress(listen_address_);
  hello.setIsDriver(!options_.is_worker);
  hello.setLogToDriver(!options_.is_worker && options_.log_to_driver);
  hello.setNodeId(DataOf(node_id_));
  conn->Send(out.builder());
  remote_nodes_[address] = conn;
  return conn;
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
  for (const auto& [address, conn] : remote_nodes_) {
    auto it = remote_node_ids_.find(address);
    if (it != remote_node_ids_.end() && it->second == node) doomed.push_back(conn);
  }
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

void CoreWorker::OnRemoteNodeLost(Connection& conn, const absl::Status& why) {
  for (auto it = remote_nodes_.begin(); it != remote_nodes_.end(); ++it) {
    if (it->second.get() == &conn) {
      auto keep = it->second;
      remote_nodes_.erase(it);
      ReleaseLater(std::move(keep));
      break;
    }
  }
  if (stopped_) return;
  LUMEN_LOG(DEBUG) << "lost a remote node daemon: " << why;
  FailNodeRequests(conn.id());
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
// Connections to other processes' owner services: requests, borrowing.

void CoreWorker::SendPeerHello(Connection& conn) {
  OutMessage out;
  InitHello(out.Init(), proto::Role::PEER);
  conn.Send(out.builder());
}

void CoreWorker::WithPeer(const std::string& address, ConnectionUse use) {
  io_checker_.Check("CoreWorker::WithPeer");
  WithConnection(connecting_peers_, peers_, address, std::move(use), &CoreWorker::AdoptPeer);
}

void CoreWorker::WithConnection(
    absl::flat_hash_map<std::string, std::vector<ConnectionUse>>& waiting,
    const absl::flat_hash_map<std::string, std::shared_ptr<Connection>>& open,
    const std::string& address, ConnectionUse use,
    std::shared_ptr<Connection> (CoreWorker::*adopt)(const std::string&, Socket)) {
  // Behind a connect in flight: wait in order (an escape before its removeBorrower).
  if (auto pending = waiting.find(address); pending != waiting.end()) {
    pending->second.push_back(std::move(use));
    return;
  }
  auto it = open.find(address);
  if (it != open.end() && !it->second->closed()) {
    use(it->second);
    return;
  }
  waiting[address].push_back(std::move(use));
  AsyncConnectToAddress(io_, address, options_.session_dir, options_.timeouts.connect_timeout,
                        [this, &waiting, &open, address, adopt](absl::StatusOr<Socket> socket) {
                          OnConnectEnded(waiting, open, address, std::move(socket), adopt);
                        });
}

void CoreWorker::OnConnectEnded(
    absl::flat_hash_map<std::string, std::vector<ConnectionUse>>& waiting,
    const absl::flat_hash_map<std::string, std::shared_ptr<Connection>>& open,
    const std::string& address, absl::StatusOr<Socket> socket,
    std::shared_ptr<Connection> (CoreWorker::*adopt)(const std::string&, Socket)) {
  auto entry = waiting.extract(address);
  if (entry.empty() || stopped_) return;  // shutting down: nothing is sent any more
  absl::StatusOr<std::shared_ptr<Connection>> conn;
  auto it = open.find(address);
  if (it != open.end() && !it->second->closed()) {
    conn = it->second;  // opened meanwhile; the new socket closes
  } else if (!socket.ok()) {
    conn = socket.status();
  } else {
    conn = (this->*adopt)(address, std::move(*socket));
  }
  for (auto& use : entry.mapped()) use(conn);
}

std::shared_ptr<Connection> CoreWorker::AdoptPeer(const std::string& address, Socket socket) {
  auto conn = Connection::Create(std::move(socket), RuntimePeerConnectionOptions());
  conn->Start([this](Connection& c, proto::Envelope::Reader m) {
                // Replies to our requests; anything else is served as on a
                // connection the peer opened (owner_service.h).
                if (!m.isActorState() && !m.isObjectStatus()) {
                  owner_service_->OnFrame(c, m);
                  return;
                }
                io_checker_.Check("CoreWorker::AdoptPeer");
                auto it = peer_requests_.find(m.getRequestId());
                if (it == peer_requests_.end()) return;
                auto cb = std::move(it->second.callback);
                peer_requests_.erase(it);
                cb(m);
              },
              [this, address](Connection& c, const absl::Status& why) {
                peers_.erase(address);
                // Nothing will answer the requests sent on it: each callback
                // gets an empty envelope (read as "no answer").
                std::vector<std::function<void(proto::Envelope::Reader)>> unanswered;
                absl::erase_if(peer_requests_, [&](auto& entry) {
                  if (entry.second.conn_id != c.id()) return false;
                  unanswered.push_back(std::move(entry.second.callback));
                  return true;
                });
                capnp::MallocMessageBuilder empty;
                auto nothing = empty.initRoot<proto::Envelope>().asReader();
                for (auto& callback : unanswered) callback(nothing);
                if (stopped_) return;
                // The owner is gone: what we were waiting for from it is lost.
                std::vector<ObjectId> lost;
                {
                  ObjectTable::Locked objects(*object_table_);
                  for (auto& [id, e] : *objects) {
                    if (!e.owned && !e.ready && e.requested && e.owner_address == address) {
                      lost.push_back(id);
                    }
                  }
                }
                for (const auto& orphan : actor_submitter_->LocatingThrough(address)) {
                  OnActorOwnerUnreachable(orphan.actor, orphan.failed_address,
                                          absl::StrCat("the actor's owner at ", address,
                                                       " died: ", why.message()));
                }
                for (const auto& id : lost) {
                  memory_store_->SetFailed(id, Failure{proto::FailureKind::OBJECT_LOST,
                                              kOwnerDiedErrorType,
                                              absl::StrCat("the owner of object ", id.Hex(), " at ",
                                                           address, " died: ", why.message()),
                                              ""});
                }
              });
  SendPeerHello(*conn);
  peers_[address] = conn;
  return conn;
}

// Borrowing: what the reference counter tells other owners.

void CoreWorker::SendEscapeRef(const ObjectId& id, const std::string& owner) {
  // A borrowed ref passed on: the owner pins it for the next reader. Sent on the
  // same connection as (and so before) our own removeBorrower.
  PostToIo("worker.send_escape_ref", [this, id, owner] {
    WithPeer(owner, [id](absl::StatusOr<std::shared_ptr<Connection>> conn) {
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
    WithPeer(owner, [id, add](absl::StatusOr<std::shared_ptr<Connection>> conn) {
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
