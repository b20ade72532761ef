// OutboundConnections: the connections this process opens and the requests
// awaiting replies on them (outbound_connections.h). io thread.
#include "core/worker/outbound_connections.h"

#include <utility>

#include "lumen/common/address.h"
#include "lumen/common/codec.h"
#include "lumen/common/head_client.h"
#include "lumen/common/logging.h"
#include "lumen/common/post.h"
#include "lumen/common/proto_util.h"

namespace lumen::runtime {
namespace {

// Runs each callback with an empty envelope (read as "no answer").
void AnswerNothing(std::vector<ReplyCallback>& callbacks) {
  capnp::MallocMessageBuilder empty;
  auto nothing = empty.initRoot<proto::Envelope>().asReader();
  for (auto& callback : callbacks) callback(nothing);
}

// Takes the callbacks of the requests in `requests` sent on `conn_id` (all
// without one).
template <class Requests>
std::vector<ReplyCallback> TakeRequests(Requests& requests, std::optional<uint64_t> conn_id) {
  std::vector<ReplyCallback> taken;
  absl::erase_if(requests, [&](auto& entry) {
    if (conn_id && entry.second.conn_id != *conn_id) return false;
    taken.push_back(std::move(entry.second.callback));
    return true;
  });
  return taken;
}

}  // namespace

OutboundConnections::OutboundConnections(boost::asio::io_context& io,
                                         OutboundConnectionsHost& host, Options options,
                                         std::shared_ptr<Connection> node_conn)
    : io_(io), host_(host), options_(std::move(options)), node_conn_(std::move(node_conn)) {}

void OutboundConnections::SendPeerHello(Connection& conn) {
  OutMessage out;
  InitHello(out.Init(), proto::Role::PEER);
  conn.Send(out.builder());
}

void OutboundConnections::WithNode(const std::string& address, ConnectionUse use) {
  io_thread_.Check("OutboundConnections::WithNode");
  if (address.empty() || address == options_.node_address) {
    if (node_conn_) {
      use(node_conn_);
    } else {
      use(absl::UnavailableError("not connected to the node daemon"));
    }
    return;
  }
  WithConnection(connecting_nodes_, remote_nodes_, address, std::move(use),
                 &OutboundConnections::AdoptNode);
}

void OutboundConnections::WithPeer(const std::string& address, ConnectionUse use) {
  io_thread_.Check("OutboundConnections::WithPeer");
  WithConnection(connecting_peers_, peers_, address, std::move(use),
                 &OutboundConnections::AdoptPeer);
}

void OutboundConnections::WithConnection(
    absl::flat_hash_map<std::string, std::vector<ConnectionUse>>& waiting,
    const absl::flat_hash_map<std::string, std::shared_ptr<Connection>>& open,
    const std::string& address, ConnectionUse use, Adopt adopt) {
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
  AsyncConnectToAddress(io_, address, options_.session_dir, options_.connect_timeout,
                        [this, &waiting, &open, address, adopt](absl::StatusOr<Socket> socket) {
                          OnConnectEnded(waiting, open, address, std::move(socket), adopt);
                        });
}

void OutboundConnections::OnConnectEnded(
    absl::flat_hash_map<std::string, std::vector<ConnectionUse>>& waiting,
    const absl::flat_hash_map<std::string, std::shared_ptr<Connection>>& open,
    const std::string& address, absl::StatusOr<Socket> socket, Adopt adopt) {
  auto entry = waiting.extract(address);
  if (entry.empty() || host_.Stopped()) return;  // shutting down: nothing is sent any more
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

std::shared_ptr<Connection> OutboundConnections::AdoptNode(const std::string& address,
                                                           Socket socket) {
  auto conn = Connection::Create(std::move(socket));
  conn->Start(
      [this, address](Connection& c, proto::Envelope::Reader m) {
        if (m.isHelloReply()) {
          // A welcome needs nothing more; a refusal (the node closes
          // next) is logged with its reason, since this owner's requests
          // to that node fail from now on.
          if (!m.getHelloReply().getOk()) {
            LUMEN_LOG(WARNING) << "node daemon at " << address << " refused this owner: "
                               << m.getHelloReply().getError().cStr();
          }
          return;
        }
        host_.OnNodeFrame(c, m);
      },
      [this](Connection& c, const absl::Status& why) { OnRemoteNodeLost(c, why); });
  OutMessage out;
  auto hello = InitHello(out.Init(), proto::Role::REMOTE_OWNER);
  hello.setWorkerId(DataOf(options_.worker_id));
  hello.setJobId(DataOf(options_.job_id));
  hello.setExePath(options_.exe_path);
  hello.setListenAddress(options_.listen_address);
  hello.setIsDriver(options_.is_driver);
  hello.setLogToDriver(options_.log_to_driver);
  hello.setNodeId(DataOf(options_.node_id));
  conn->Send(out.builder());
  remote_nodes_[address] = conn;
  return conn;
}

void OutboundConnections::OnRemoteNodeLost(Connection& conn, const absl::Status& why) {
  for (auto it = remote_nodes_.begin(); it != remote_nodes_.end(); ++it) {
    if (it->second.get() == &conn) {
      // Alive until the handlers on the io thread's stack returned (this
      // runs inside the connection's own callback).
      lumen::ReleaseLater(io_, "worker.release_later", std::move(it->second));
      remote_nodes_.erase(it);
      break;
    }
  }
  if (host_.Stopped()) return;
  LUMEN_LOG(DEBUG) << "lost a remote node daemon: " << why;
  FailNodeRequests(conn.id());
}

std::shared_ptr<Connection> OutboundConnections::AdoptPeer(const std::string& address,
                                                           Socket socket) {
  auto conn = Connection::Create(std::move(socket), RuntimePeerConnectionOptions());
  conn->Start(
      [this](Connection& c, proto::Envelope::Reader m) {
        // Replies to our requests; anything else is the host's.
        if (!m.isActorState() && !m.isObjectStatus()) {
          host_.OnPeerFrame(c, m);
          return;
        }
        io_thread_.Check("OutboundConnections::AdoptPeer");
        auto it = peer_requests_.find(m.getRequestId());
        if (it == peer_requests_.end()) return;
        auto cb = std::move(it->second.callback);
        peer_requests_.erase(it);
        cb(m);
      },
      [this, address](Connection& c, const absl::Status& why) {
        peers_.erase(address);
        // Nothing will answer the requests sent on it.
        auto unanswered = TakeRequests(peer_requests_, c.id());
        AnswerNothing(unanswered);
        if (host_.Stopped()) return;
        host_.OnOwnerLost(address, why);
      });
  SendPeerHello(*conn);
  peers_[address] = conn;
  return conn;
}

uint64_t OutboundConnections::SendRequest(absl::flat_hash_map<uint64_t, Request>& requests,
                                          Connection& conn, const RequestFill& fill,
                                          ReplyCallback callback) {
  io_thread_.Check("OutboundConnections::SendRequest");
  uint64_t request_id = next_request_id_++;
  requests[request_id] = Request{conn.id(), std::move(callback)};
  OutMessage out;
  auto env = out.Init();
  env.setRequestId(request_id);
  fill(env);
  conn.Send(out.builder());
  return request_id;
}

uint64_t OutboundConnections::SendNodeRequest(Connection& conn, const RequestFill& fill,
                                              ReplyCallback callback) {
  return SendRequest(node_requests_, conn, fill, std::move(callback));
}

void OutboundConnections::ExpectNodeReply(uint64_t request_id, uint64_t conn_id,
                                          ReplyCallback callback) {
  io_thread_.Check("OutboundConnections::ExpectNodeReply");
  node_requests_[request_id] = Request{conn_id, std::move(callback)};
}

bool OutboundConnections::TakeNodeReply(proto::Envelope::Reader msg) {
  auto it = node_requests_.find(msg.getRequestId());
  if (it == node_requests_.end()) return false;
  auto callback = std::move(it->second.callback);
  node_requests_.erase(it);
  callback(msg);
  return true;
}

void OutboundConnections::FailNodeRequests(std::optional<uint64_t> conn_id) {
  auto failed = TakeRequests(node_requests_, conn_id);
  AnswerNothing(failed);
}

void OutboundConnections::SendPeerRequest(Connection& conn, const RequestFill& fill,
                                          ReplyCallback callback) {
  SendRequest(peer_requests_, conn, fill, std::move(callback));
}

std::vector<std::shared_ptr<Connection>> OutboundConnections::RemoteNodes() const {
  std::vector<std::shared_ptr<Connection>> nodes;
  for (const auto& [address, conn] : remote_nodes_) {
    if (conn && !conn->closed()) nodes.push_back(conn);
  }
  return nodes;
}

std::vector<std::shared_ptr<Connection>> OutboundConnections::RemoteNodesOf(
    const NodeId& node) const {
  std::vector<std::shared_ptr<Connection>> nodes;
  for (const auto& [address, conn] : remote_nodes_) {
    auto it = remote_node_ids_.find(address);
    if (it != remote_node_ids_.end() && it->second == node) nodes.push_back(conn);
  }
  return nodes;
}

void OutboundConnections::CloseRemoteNodes(const absl::Status& why) {
  auto remotes = remote_nodes_;  // closing erases from remote_nodes_
  for (auto& [address, conn] : remotes) conn->Close(why);
}

void OutboundConnections::ClosePeers(const absl::Status& why) {
  auto peers = peers_;  // closing erases from peers_
  for (auto& [addr, conn] : peers) conn->Close(why);
}

}  // namespace lumen::runtime
