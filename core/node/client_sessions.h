// ClientSessions: what a client's hello and its close mean to this node.
// A hello registers the client by role (a driver becomes its job's driver and
// gets a prestarted pool; a worker joins the pool; a remote owner's job gets
// an entry so its workers run the same binary), answers it (a local client
// gets the store's fd with the reply) and wakes the lease manager. A close
// releases what the client held (store pins, log forwarding, lease requests)
// and ends its job (a driver) or kills its worker. EndJob is also what the
// head's cluster view triggers for a job that ended elsewhere.
//
//   ClientSessions sessions({.io = &io, .clients = &clients, ..., .head = head.get()});
//   sessions.OnFirstFrame(conn, msg);         // a connection's first frame
//   sessions.OnClose(conn, why);              // the connection's close handler
//
// Only on the node daemon's io thread. Borrows every part in its options;
// they outlive it (the daemon owns them all).
#pragma once

#include <string>
#include <utility>

#include <boost/asio.hpp>

#include "absl/status/status.h"
#include "core/node/client_registry.h"
#include "core/node/cluster_state.h"
#include "core/node/head_link.h"
#include "core/node/local_lease_manager.h"
#include "core/node/process_launcher.h"
#include "core/node/remote_owners.h"
#include "core/node/worker_log_router.h"
#include "core/node/worker_pool.h"
#include "lumen/common/connection.h"
#include "lumen/common/ids.h"
#include "lumen/objectstore/store_server.h"

namespace lumen::node {

struct ClientSessionsOptions {
  boost::asio::io_context* io = nullptr;
  ClientRegistry* clients = nullptr;
  ClusterState* cluster = nullptr;
  WorkerPool* pool = nullptr;
  ProcessLauncher* launcher = nullptr;
  LocalLeaseManager* leases = nullptr;
  WorkerLogRouter* worker_logs = nullptr;
  objectstore::StoreServer* store = nullptr;
  HeadLink* head = nullptr;  // nullptr: a node without a head
  RemoteOwners* remote_owners = nullptr;
  // What the hello reply tells the client.
  NodeId node_id;
  std::string session_dir;
  std::string host;
  std::string address;  // "host:port;/unix/path"
};

class ClientSessions {
 public:
  explicit ClientSessions(ClientSessionsOptions options) : o_(std::move(options)) {}

  // A connection's first frame: it must be a hello, which registers and
  // answers it; otherwise (or for a bad version or token, an ended job, a
  // second driver for a job, a worker the pool did not start) the connection
  // is closed.
  void OnFirstFrame(Connection& conn, proto::Envelope::Reader msg);
  // The connection closed (`why`: its reason; logged unless a plain close).
  void OnClose(Connection& conn, const absl::Status& why);
  // The job ended (its driver left, here or elsewhere): its workers are killed
  // and its objects go, except what detached actors keep.
  void EndJob(const JobId& job_id);
  // A remote owner is known dead (RemoteOwners): its objects here go; the
  // job's driver ends its job here.
  void OnRemoteOwnerGone(const RemoteOwners::Gone& gone);

 private:
  void OnHello(Connection& conn, proto::Hello::Reader hello);
  // Closes a peer's connection after a hello reply that says why (ok = false).
  void RefuseHello(Connection& conn, const absl::Status& why);

  const ClientSessionsOptions o_;
};

}  // namespace lumen::node
