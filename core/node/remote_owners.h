// RemoteOwners: when may a node free what a driver or worker of another node
// owns here? Such a remote owner reaches this daemon over its own connection
// (role remoteOwner), and the store records the primary copies it owns under
// a key (StoreServer::OwnerGone frees them). That connection closing does not
// mean the owner died: a link fault (a reset, a proxy, a partition that
// heals) closes it too while the owner lives, and freeing then would lose
// objects that are still referenced (doc/reliability.md, item 4). So a closed
// remote owner is only *disconnected*: its key stays, and a new connection
// from the same worker (its hello names it) takes the same key back; its
// objects go (`gone`) only once it is known dead: its owner service's address
// refuses a connection (nothing listens there any more: the process is gone,
// or its node with it), checked every `probe_period` while it is away. A
// probe that times out (a partition) says nothing: its owner's node being
// declared dead by the head does (NodeDied: the cluster gave up on every
// process there, which exits when it hears so), and its job's end still frees
// everything (ClientSessions::EndJob).
//
// A local driver or worker is not tracked here: its Unix-socket connection to
// its own daemon closes only when it exits, so that close is its death.
//
//   RemoteOwners owners({.io = &io, .session_dir = dir, .probe_period = 500ms,
//                        .gone = [&](const RemoteOwners::Gone& g) { store->OwnerGone(g.key); }});
//   absl::StatusOr<uint64_t> key =  // refused: an owner on a node declared dead
//       owners.OnHello(worker_id, node_id, job, listen_address, is_driver, conn.id());
//   owners.OnClosed(conn.id());        // its connection closed: probe from now on
//   owners.NodeDied(node_id);          // the head declared its node dead: gone now
//   owners.EndJob(job);                // its job ended: nothing left to free
//
// Only on the node daemon's io thread (checked in debug builds).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <boost/asio.hpp>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "lumen/common/ids.h"
#include "lumen/common/recent_set.h"
#include "lumen/common/thread_checker.h"

namespace lumen::node {

class RemoteOwners {
 public:
  // What died: the key its objects are recorded under, its job, and whether
  // it was the job's driver (whose death ends the job here).
  struct Gone {
    uint64_t key = 0;
    JobId job;
    bool is_driver = false;
    std::string why;
    // Its connection here while still open (a node declared dead while its
    // processes' links stay up), else 0: the caller closes it, so nothing
    // more is recorded under the freed key.
    uint64_t conn = 0;
  };
  struct Options {
    boost::asio::io_context* io = nullptr;
    std::string session_dir;  // ours: a remote owner's Unix path is never under it
    std::chrono::milliseconds probe_period{500};
    std::chrono::milliseconds connect_timeout{1000};
    std::function<void(const Gone&)> gone;  // on the io thread
  };

  explicit RemoteOwners(Options options);
  ~RemoteOwners();
  RemoteOwners(const RemoteOwners&) = delete;
  RemoteOwners& operator=(const RemoteOwners&) = delete;

  // A remote owner's hello on connection `conn`: returns the key its objects
  // are recorded under (the id of its first connection here; the same key
  // when it comes back after a link fault). `node`: the node it runs on (its
  // binary id; empty from a peer that does not say). FailedPrecondition for
  // an owner on a node already declared dead (NodeDied): the cluster gave
  // up on that process, so what it would own here would never be freed
  // before its job ends.
  [[nodiscard]] absl::StatusOr<uint64_t> OnHello(const WorkerId& worker, const std::string& node, const JobId& job,
                   const std::string& listen_address, bool is_driver, uint64_t conn);
  // Its connection `conn` closed: from now on it is probed until it comes
  // back, is found dead (`gone`), or its job ends. Unknown connections: nothing.
  void OnClosed(uint64_t conn);
  // Its job ended (its objects went with it): forgets the job's owners.
  void EndJob(const JobId& job);
  // The head declared `node` (binary id) dead: every owner there is gone now,
  // connected or not (a frozen or cut-off host's addresses do not refuse a
  // probe, they time out), and later hellos from there are refused (the
  // last kRememberedDeadNodes dead nodes are remembered).
  void NodeDied(const std::string& node);

  // Owners known, and those disconnected now (for tests and logs).
  size_t known() const { return owners_.size(); }
  size_t disconnected() const;

 private:
  struct Owner {
    uint64_t key = 0;
    uint64_t conn = 0;  // 0: disconnected
    JobId job;
    std::string node;  // binary NodeId; empty: not said
    std::string listen_address;
    bool is_driver = false;
    bool probing = false;  // a connect in flight
  };
  static constexpr size_t kRememberedDeadNodes = 4096;
  void ScheduleProbes();
  void ProbeAll();
  void OnProbed(const WorkerId& worker, uint64_t key, const std::string& error);

  Options options_;
  ThreadChecker io_thread_;
  absl::flat_hash_map<WorkerId, Owner> owners_;
  absl::flat_hash_map<uint64_t, WorkerId> by_conn_;  // open connections only
  RecentSet<std::string> dead_nodes_{kRememberedDeadNodes};  // binary node ids, from NodeDied
  boost::asio::steady_timer timer_;
  bool timer_armed_ = false;
  std::shared_ptr<bool> alive_;  // false once destroyed: late connects do nothing
};

}  // namespace lumen::node
