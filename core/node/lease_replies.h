// LeaseReplies: the lease manager's answers (grant, refuse, spill back, retry,
// waiting, reclaim) as leaseReply frames on the clients' connections; answers
// to a client that is gone are dropped. The final answer to a keyed lease
// request (LeaseRequest.retryKey) is kept in keyed(), which answers a resent
// request with it (doc/reliability.md, item 9).
//
//   LeaseReplies replies(clients, cluster, node_id);
//   LocalLeaseManager leases({..., .clients = &replies, ...});
//   if (!replies.keyed().Repeat(conn, msg, /*bound=*/true)) OnLeaseRequest(conn, msg);
//
// Only on the node daemon's io thread. Borrows the registry and the cluster
// state, which outlive it.
#pragma once

#include <string>

#include "core/node/client_registry.h"
#include "core/node/cluster_state.h"
#include "core/node/keyed_requests.h"
#include "core/node/local_lease_manager.h"
#include "lumen/common/ids.h"

namespace lumen::node {

class LeaseReplies : public LeaseClients {
 public:
  LeaseReplies(ClientRegistry& clients, ClusterState& cluster, const NodeId& node)
      : clients_(clients), cluster_(cluster), node_(node) {}

  bool IsConnected(ClientId client) override { return clients_.IsOpen(client); }
  void Grant(ClientId client, uint64_t request_id, const LeaseGrant& grant) override;
  void Refuse(ClientId client, uint64_t request_id, const std::string& why) override;
  void Spillback(ClientId client, uint64_t request_id, const std::string& node_id) override;
  void Retry(ClientId client, uint64_t request_id) override;
  void Waiting(ClientId client, uint64_t request_id, const std::string& why) override;
  void Reclaim(ClientId holder) override;

  // Keyed lease requests and their answers (a lease is bound to its connection).
  KeyedRequests& keyed() { return keyed_; }

 private:
  // Sends a final answer, kept first when it answers a keyed request.
  void Answer(ClientId client, uint64_t request_id, OutMessage& out);

  ClientRegistry& clients_;
  ClusterState& cluster_;
  NodeId node_;
  KeyedRequests keyed_;
};

}  // namespace lumen::node
