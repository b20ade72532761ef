// The connections one driver or worker process opens, and the requests it
// sends on them awaiting their replies: to its own node daemon (opened at
// startup and handed in), to other nodes' daemons (where it leases workers or
// deletes copies; hello with role REMOTE_OWNER) and to other processes' owner
// services (hello with role PEER). A connection is opened on first use,
// without blocking (AsyncConnectToAddress, Options::connect_timeout); what is
// asked of it meanwhile waits, in order, and runs once the connect ends, with
// the connection or the connect's error. A reply is matched to its request by
// id on the connection the request went out on; when that connection closes,
// each request still waiting gets an empty envelope (read as "no answer").
//
//   OutboundConnections out(io, host, options, node_conn);
//   out.WithPeer(owner, [](absl::StatusOr<std::shared_ptr<Connection>> c) { ... });
//   out.SendPeerRequest(**c, fill, [](proto::Envelope::Reader reply) { ... });
//   out.SendNodeRequest(*node, fill, callback);   // node_conn or a remote daemon
//   out.CloseRemoteNodes(why); out.ClosePeers(why); out.FailNodeRequests();  // Stop
//
// What a frame that is not a reply means, and what the loss of another owner
// means, is the host's (OutboundConnectionsHost). io thread only (checked in
// debug builds). Internal to core/worker.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio.hpp>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "lumen/common/connection.h"
#include "lumen/common/ids.h"
#include "lumen/common/thread_checker.h"

namespace lumen::runtime {

// What waits for a connection: it, or the connect's error. io thread.
using ConnectionUse = std::function<void(absl::StatusOr<std::shared_ptr<Connection>>)>;
// What a request's reply (or an empty envelope: no answer) goes to.
using ReplyCallback = std::function<void(proto::Envelope::Reader)>;
// Fills a request's envelope (its request id is set already).
using RequestFill = std::function<void(proto::Envelope::Builder)>;

// What OutboundConnections asks of the runtime. io thread.
class OutboundConnectionsHost {
 public:
  virtual ~OutboundConnectionsHost() = default;
  // True once the runtime stops: connects that end are dropped, and a lost
  // connection means nothing more.
  virtual bool Stopped() const = 0;
  // A frame from a node daemon (ours or another): the host's own ones first,
  // then TakeNodeReply for the answers to our requests.
  virtual void OnNodeFrame(Connection& conn, proto::Envelope::Reader msg) = 0;
  // A frame from an owner service we connected to that is not a reply.
  virtual void OnPeerFrame(Connection& conn, proto::Envelope::Reader msg) = 0;
  // Our connection to the owner service at `address` closed (`why`), while
  // the runtime runs: what we wait for from that owner is lost.
  virtual void OnOwnerLost(const std::string& address, const absl::Status& why) = 0;
};

class OutboundConnections {
 public:
  struct Options {
    std::string session_dir;  // where this node's Unix sockets lie
    std::chrono::milliseconds connect_timeout{0};
    std::string node_address;  // our node daemon's (WithNode("") and it: node_conn)
    // Our hello to other nodes' daemons.
    WorkerId worker_id;
    JobId job_id;
    NodeId node_id;
    std::string exe_path;
    std::string listen_address;  // our owner service
    bool is_driver = false;
    bool log_to_driver = false;  // have that daemon forward its workers' output to us
  };

  // `io` and `host` outlive this; `node_conn` is our node daemon's connection.
  OutboundConnections(boost::asio::io_context& io, OutboundConnectionsHost& host,
                      Options options, std::shared_ptr<Connection> node_conn);
  OutboundConnections(const OutboundConnections&) = delete;
  OutboundConnections& operator=(const OutboundConnections&) = delete;

  // Runs `use` with our connection to the node daemon at `address` (ours when
  // empty or ours): at once when it is open, else once a connect ends, in
  // the order asked; with the connect's error if it fails.
  void WithNode(const std::string& address, ConnectionUse use);
  // Like WithNode, for the owner service of another process at `address`.
  void WithPeer(const std::string& address, ConnectionUse use);
  // The first frame on a connection we open to another process's owner
  // service (also on leased workers' and actors' connections). Any thread
  // that may send on `conn`.
  static void SendPeerHello(Connection& conn);

  // Sends a request to a node daemon on `conn`; `callback` gets its reply, or
  // an empty envelope when `conn` closes first. Returns the request's id.
  uint64_t SendNodeRequest(Connection& conn, const RequestFill& fill, ReplyCallback callback);
  // For a request built by its sender (the lease requester's keyed resends):
  // a fresh request id, and the callback for the reply to `request_id` on
  // the connection `conn_id`.
  uint64_t NextRequestId() {
    io_thread_.Check("OutboundConnections::NextRequestId");
    return next_request_id_++;
  }
  void ExpectNodeReply(uint64_t request_id, uint64_t conn_id, ReplyCallback callback);
  // No reply to `request_id` is wanted any more (its callback is dropped).
  void ForgetNodeRequest(uint64_t request_id) { node_requests_.erase(request_id); }
  // The reply to one of our node requests: its callback runs. False when
  // `msg` answers none.
  bool TakeNodeReply(proto::Envelope::Reader msg);
  // Answers every request waiting at a node daemon with an empty envelope;
  // with `conn_id`, only those sent on that connection.
  void FailNodeRequests(std::optional<uint64_t> conn_id = std::nullopt);
  // Sends a request to the owner service on `conn` (from WithPeer);
  // `callback` gets its reply (objectStatus, actorState), or an empty
  // envelope when `conn` closes first.
  void SendPeerRequest(Connection& conn, const RequestFill& fill, ReplyCallback callback);

  // `address` (from a spillback) is node `node`'s daemon.
  void RecordNodeId(const std::string& address, const NodeId& node) {
    remote_node_ids_[address] = node;
  }
  // Our open connections to other nodes' daemons; those to node `node`.
  std::vector<std::shared_ptr<Connection>> RemoteNodes() const;
  std::vector<std::shared_ptr<Connection>> RemoteNodesOf(const NodeId& node) const;
  // Shutdown: closes our connections to other nodes' daemons, to other
  // owners' services.
  void CloseRemoteNodes(const absl::Status& why);
  void ClosePeers(const absl::Status& why);

 private:
  using Adopt = std::shared_ptr<Connection> (OutboundConnections::*)(const std::string&, Socket);
  // WithNode's and WithPeer's shared part: `use` runs with the open
  // connection to `address` in `open`, or waits in `waiting` behind a
  // connect (started here when none is in flight; its socket adopted by
  // `adopt`).
  void WithConnection(absl::flat_hash_map<std::string, std::vector<ConnectionUse>>& waiting,
                      const absl::flat_hash_map<std::string, std::shared_ptr<Connection>>& open,
                      const std::string& address, ConnectionUse use, Adopt adopt);
  // Runs what waits in `waiting` for `address` once its connect ended: with
  // the open connection in `open` (maybe made meanwhile), the new socket
  // adopted by `adopt`, or the error.
  void OnConnectEnded(absl::flat_hash_map<std::string, std::vector<ConnectionUse>>& waiting,
                      const absl::flat_hash_map<std::string, std::shared_ptr<Connection>>& open,
                      const std::string& address, absl::StatusOr<Socket> socket, Adopt adopt);
  // A new connection to the remote daemon (the owner service) at `address`:
  // started, hello sent, kept.
  std::shared_ptr<Connection> AdoptNode(const std::string& address, Socket socket);
  std::shared_ptr<Connection> AdoptPeer(const std::string& address, Socket socket);
  void OnRemoteNodeLost(Connection& conn, const absl::Status& why);

  struct Request {
    uint64_t conn_id = 0;  // the connection it went out on
    ReplyCallback callback;
  };
  // Sends a request on `conn` under a fresh id, its callback kept in
  // `requests` (node_requests_ or peer_requests_). Returns the id.
  uint64_t SendRequest(absl::flat_hash_map<uint64_t, Request>& requests, Connection& conn,
                       const RequestFill& fill, ReplyCallback callback);

  boost::asio::io_context& io_;
  OutboundConnectionsHost& host_;
  const Options options_;
  const std::shared_ptr<Connection> node_conn_;
  ThreadChecker io_thread_;
  uint64_t next_request_id_ = 1;
  absl::flat_hash_map<uint64_t, Request> node_requests_;
  // Dropped with the connection they went out on.
  absl::flat_hash_map<uint64_t, Request> peer_requests_;
  // Node daemons of other nodes we lease from or free objects on, by address.
  absl::flat_hash_map<std::string, std::shared_ptr<Connection>> remote_nodes_;
  absl::flat_hash_map<std::string, NodeId> remote_node_ids_;  // address -> node, from spillbacks
  absl::flat_hash_map<std::string, std::shared_ptr<Connection>> peers_;  // by address
  // What waits for connects in flight, by address: to owner services
  // (peers_) and to other nodes' daemons (remote_nodes_).
  absl::flat_hash_map<std::string, std::vector<ConnectionUse>> connecting_peers_;
  absl::flat_hash_map<std::string, std::vector<ConnectionUse>> connecting_nodes_;
};

}  // namespace lumen::runtime
