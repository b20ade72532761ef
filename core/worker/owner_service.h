// The owner service of one driver or worker process (what Ray's core worker
// serves to other workers over gRPC, smaller): it listens on a Unix socket
// (peers on this node) and a TCP port (other nodes), keeping each accept loop
// alive through EMFILE and the like (AcceptRetry); admits the accepted
// connections that say hello first (HelloAdmission caps per listener; beyond
// loopback only holders of the cluster token); and answers their frames:
//   - waits for objects we own (waitObject, recoverObject), answered with the
//     object's status once it is ready or failed, parked until then (at most
//     kMaxParkedWaitsPerPeer per peer and kMaxParkedWaits in all: a peer over
//     either is disconnected);
//   - location updates (a peer made a copy of our object), lost copies;
//   - borrower registrations and releases (BorrowerRegistry: what a peer
//     still borrows is released when it goes away) and escaped refs;
//   - actor waits and kills for the actors this process owns (ActorOwner);
//   - in a worker, pushed tasks, decoded for the TaskReceiver.
// What it needs of the rest of the runtime it asks through OwnerServiceHost.
//
//   OwnerService service(io, table, refs, receiver, actor_owner, host, options);
//   auto address = service.Listen();     // before the io thread runs
//   conn->Start([&](Connection& c, auto m) { service.OnFrame(c, m); }, ...);
//   service.StopAccepting(); ... service.CloseInbound();   // shutdown, io thread
//
// io thread only (checked in debug builds at OnFrame and AnswerWhenReady),
// but for Listen (before the io thread runs) and the accessors. Internal to
// core/worker.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <boost/asio.hpp>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "core/worker/borrower_registry.h"
#include "lumen/common/accept_retry.h"
#include "lumen/common/connection.h"
#include "lumen/common/ids.h"
#include "lumen/common/thread_checker.h"

namespace lumen::actors {
class ActorOwner;
}

namespace lumen::runtime {

class ObjectTable;
class ReferenceCounter;
class TaskReceiver;

// What the owner service asks of the runtime it serves. io thread.
class OwnerServiceHost {
 public:
  virtual ~OwnerServiceHost() = default;
  // Runs `fn` on the io thread later under `name`; false (and `fn` dropped)
  // once the runtime stops.
  virtual bool Post(const char* name, std::function<void()> fn) = 0;
  // A peer made a copy of our object `id` on `node` (at `address`).
  virtual void OnObjectLocationAdded(const ObjectId& id, const NodeId& node,
                                     const std::string& address) = 0;
  // A reader could not read our object `id` at `node` (`why`).
  virtual void OnCopyUnreadable(const ObjectId& id, const NodeId& node,
                                const std::string& why) = 0;
  // killActor for `id`, which this process does not own: if this process is
  // that actor (its owner is gone), it frees its name and exits.
  virtual void OnKillUnowned(const ObjectId& id) = 0;
  // The task pushed on `owner` creates this process's actor `id` (`name`):
  // `owner` is the connection of the actor's owner.
  virtual void OnBecomeActor(Connection& owner, const ObjectId& id, std::string name) = 0;
};

class OwnerService {
 public:
  static constexpr size_t kMaxParkedWaitsPerPeer = 1000000;
  static constexpr size_t kMaxParkedWaits = 2000000;

  struct Options {
    // The TCP listener's host; beyond loopback a peer's hello must carry the
    // cluster token.
    std::string node_host = "127.0.0.1";
    std::string session_dir;  // the Unix socket lies in its sockets/
    bool is_worker = false;   // a driver refuses pushed tasks
    WorkerId worker_id;       // names the Unix socket
  };

  // Every reference outlives the service.
  OwnerService(boost::asio::io_context& io, ObjectTable& objects, ReferenceCounter& refs,
               TaskReceiver& receiver, actors::ActorOwner& actor_owner, OwnerServiceHost& host,
               Options options);
  OwnerService(const OwnerService&) = delete;
  OwnerService& operator=(const OwnerService&) = delete;

  // Listens on the Unix socket (in the abstract namespace unless
  // LUMEN_ABSTRACT_UNIX_SOCKETS=0) and a TCP port of node_host, and accepts
  // from then on (once the io thread runs). Returns the listen address, TCP
  // and Unix. Before the io thread runs.
  [[nodiscard]] absl::StatusOr<std::string> Listen();
  const std::string& address() const { return address_; }
  // The Unix half of address() ("@..." in the abstract namespace).
  const std::string& unix_path() const { return unix_path_; }

  // A frame from a peer: on an accepted connection (after its hello), and on
  // a connection we opened to another owner service but for the replies
  // (objectStatus, actorState), which its opener takes.
  void OnFrame(Connection& conn, proto::Envelope::Reader msg);

  // Shutdown, io thread: closes the listeners; then closes every accepted
  // connection (what their peers borrowed is released).
  void StopAccepting();
  void CloseInbound();
  // Every accepted connection wrote what it queued, or closed.
  bool InboundFlushed() const;

  // Tells the owner on `conn` that the pushed task (`task_id`, `attempt`)
  // was handed back unrun (to run elsewhere). Any thread that may send on `conn`.
  static void SendRequeued(Connection& conn, const TaskId& task_id, uint32_t attempt);

 private:
  void AcceptUnix();
  void AcceptTcp();
  void OnAccepted(Socket socket);
  // Answers `request_id` on `conn` with the object's status once it is ready
  // or failed (parked until then, within the caps).
  void AnswerWhenReady(Connection& conn, uint64_t request_id, const ObjectId& id);
  void SendObjectStatus(Connection& conn, uint64_t request_id, const ObjectId& id);
  void OnPushTask(Connection& conn, proto::TaskSpec::Reader spec);

  boost::asio::io_context& io_;
  ObjectTable& objects_;
  ReferenceCounter& refs_;
  TaskReceiver& receiver_;
  actors::ActorOwner& actor_owner_;
  OwnerServiceHost& host_;
  const Options options_;
  std::string unix_path_;
  std::string address_;
  std::unique_ptr<boost::asio::local::stream_protocol::acceptor> acceptor_;
  std::unique_ptr<boost::asio::ip::tcp::acceptor> tcp_acceptor_;
  // Keep the accept loops alive through EMFILE and the like.
  AcceptRetry unix_accept_retry_{io_, "driver/worker unix listener"};
  AcceptRetry tcp_accept_retry_{io_, "driver/worker tcp listener"};

  // io thread only (checked)
  ThreadChecker io_thread_;
  absl::flat_hash_map<uint64_t, std::shared_ptr<Connection>> inbound_;  // by connection id
  // Connections awaiting their hello, capped per listener (TCP, Unix socket).
  HelloAdmission admission_{ServerLimits::FromEnv(), "owner service"};
  HelloAdmission local_admission_{ServerLimits::FromEnv(), "owner service"};
  // Object waits parked per accepted connection (the counts are decremented
  // by the parked callbacks, wherever they are destroyed).
  absl::flat_hash_map<uint64_t, std::shared_ptr<std::atomic<size_t>>> parked_waits_;
  std::shared_ptr<std::atomic<size_t>> parked_waits_total_ =
      std::make_shared<std::atomic<size_t>>(0);
  // Objects each inbound peer borrows from us, with counts (dropped if it dies).
  BorrowerRegistry borrowers_;
};

}  // namespace lumen::runtime
