// ClientRegistry: the node daemon's connected clients (drivers, workers, remote
// owners, CLI tools, other nodes) and what each said in its hello. It admits
// new connections (separate hello queues for the Unix socket and TCP, so
// strangers on the network cannot crowd out local workers), checks a hello's
// protocol version and cluster token, and finds, messages and forgets clients
// by their connection id.
//
//   ClientRegistry clients(io, {.require_token = !loopback});
//   auto conn = clients.Admit(std::move(socket));  // nullptr: refused
//   conn->Start(on_frame, on_close);
//   if (absl::Status s = clients.CheckHello(hello); !s.ok()) ...
//   ClientRegistry::Info(*conn).role = ...;
//
// Only on the node daemon's io thread (checked in debug builds).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include <boost/asio.hpp>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "lumen/common/connection.h"
#include "lumen/common/ids.h"
#include "lumen/common/thread_checker.h"

namespace lumen::node {

// What a connected client is, learned from its hello.
struct Client {
  bool hello_done = false;
  proto::Role role = proto::Role::CLI;
  JobId job;
  WorkerId worker;
  bool is_driver = false;  // a remote owner that is the job's driver
  // The key the store records the objects it owns under (StoreServer's owner):
  // a local client's connection id; a remote owner's from RemoteOwners (the
  // same across its reconnections). 0 before the hello.
  uint64_t owner_key = 0;
  // A driver or worker of this node (uses the store, leases, pulls).
  bool local() const { return role == proto::Role::DRIVER || role == proto::Role::WORKER; }
  // May lease workers (with a live job).
  bool may_lease() const { return local() || role == proto::Role::REMOTE_OWNER; }
};

struct ClientRegistryOptions {
  bool require_token = false;  // a node listening beyond loopback
};

class ClientRegistry {
 public:
  ClientRegistry(boost::asio::io_context& io, ClientRegistryOptions options);

  // Registers a newly accepted connection (hello pending). Returns nullptr when
  // its listener has too many connections awaiting hello (refused, logged).
  std::shared_ptr<Connection> Admit(Socket socket);
  // The protocol version and the token of a hello. Errors: FailedPrecondition
  // (version; its message is the hello reply's error), PermissionDenied (token).
  [[nodiscard]] absl::Status CheckHello(proto::Hello::Reader hello) const;

  // The client record of a registered connection.
  static Client& Info(Connection& conn) { return std::any_cast<Client&>(conn.context()); }
  // The open connection of a client, or nullptr.
  Connection* Find(uint64_t id);
  bool IsOpen(uint64_t id) { return Find(id) != nullptr; }
  // Queues a frame to a client; dropped when it is gone.
  void Send(uint64_t id, capnp::MessageBuilder& message);
  // Forgets a closed connection; it stays alive until the handler that closes
  // it returns (posted release).
  void Remove(uint64_t id);
  // Sends `frame` (the hello reply) with `fd` attached (SCM_RIGHTS) without
  // blocking: one non-blocking sendmsg; bytes the socket did not take are
  // queued on the connection. Errors: Unavailable when the socket took nothing
  // (on a fresh connection, only a peer already gone).
  [[nodiscard]] static absl::Status SendWithFdNow(Connection& conn, const std::string& frame, int fd);
  // Calls `fn` for each open driver and worker of this node that said hello.
  void ForEachLocalProcess(const std::function<void(Connection&)>& fn);

 private:
  ThreadChecker io_thread_;
  boost::asio::io_context& io_;
  ClientRegistryOptions options_;
  absl::flat_hash_map<uint64_t, std::shared_ptr<Connection>> clients_;
  // Connections awaiting their hello, capped per listener (TCP, Unix socket).
  HelloAdmission admission_{ServerLimits::FromEnv(), "node daemon"};
  HelloAdmission local_admission_{ServerLimits::FromEnv(), "node daemon"};
};

}  // namespace lumen::node
