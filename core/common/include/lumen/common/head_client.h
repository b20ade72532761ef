// Blocking queries to the head service, for drivers joining a cluster and for
// the command line.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include <functional>

#include "lumen/common/address.h"
#include "lumen/common/connection.h"
#include "lumen/common/ids.h"
#include "lumen/common/task_events.h"
#include "lumen/common/timeouts.h"

namespace lumen::runtime {

struct NodeView {
  NodeId id;
  std::string address;  // the node daemon's address ("host:port;/unix/path")
  std::string hostname;
  int pid = 0;
  bool alive = false;
  std::map<std::string, double> total;
  std::map<std::string, double> available;
  uint64_t store_capacity = 0;
  uint64_t store_used = 0;
  uint64_t store_objects = 0;
  // The store's pins and spilling (NodeStats.storeSummary).
  struct StoreSummary {
    uint64_t pinned_bytes = 0;
    uint64_t pinned_objects = 0;
    uint64_t spilled_bytes = 0;  // live objects with a disk copy now
    uint64_t spilled_objects = 0;
    uint64_t restored_bytes = 0;  // cumulative
    uint64_t restored_objects = 0;
    uint64_t spilled_total_bytes = 0;  // written to disk, cumulative
    uint32_t parked_creates = 0;
    uint64_t repeated_requests = 0;  // resent store requests answered from its table, cumulative
  };
  StoreSummary store;
  uint32_t workers = 0;
  uint32_t idle_workers = 0;
  uint32_t queued_leases = 0;
  uint32_t active_leases = 0;
  std::string session_dir;
  std::string transfer_address;  // where other nodes pull its objects from
  std::string host;              // the IP its processes listen on
  struct Demand {
    std::map<std::string, double> resources;
    uint32_t count = 0;
    std::string name;
  };
  std::vector<Demand> infeasible;  // lease requests no node can run yet
  std::vector<Demand> pending;     // lease requests that wait for busy resources here
};

// The token sent in every hello to the head (from Config::token, --token or
// LUMEN_TOKEN, or the token file of the session "auto" finds). Thread-safe.
void SetHeadToken(std::string token);
std::string HeadToken();

// Starts `env` as this process's hello: protocol version, `role`, pid and the
// cluster token (every first frame carries them; callers add the rest).
proto::Hello::Builder InitHello(proto::Envelope::Builder env, proto::Role role);

// How this process's calls to the head ride out a head restart
// (doc/reliability.md, item 6). Drivers and workers set it at Init (from
// Timeouts::head_reconnect_timeout / head_retry_period and what their node
// daemon said of the head's persistence); the command line leaves it off, so
// `lumen status` against a stopped cluster fails at once. Thread-safe.
struct HeadReconnect {
  // 0: no retries. Else a call whose connection to the head fails is retried
  // with a Backoff (from `initial`, doubling up to `max`) for this long.
  std::chrono::milliseconds give_up_after{0};
  std::chrono::milliseconds initial{1000};
  std::chrono::milliseconds max{2000};  // Timeouts::head_retry_max_period
  // False: the head keeps no state across a restart, so a lost head is an
  // error at once ("... persistence is off"), not retried.
  bool head_persistent = true;
};
void SetHeadReconnect(HeadReconnect reconnect);
HeadReconnect GetHeadReconnect();
// The error of a call that lost the head at `head_address` for good, after
// `waited` (0: not retried) because of `last` (the last attempt's failure).
[[nodiscard]] absl::Status HeadLostError(const std::string& head_address, const HeadReconnect& reconnect,
                           std::chrono::milliseconds waited, const absl::Status& last);

// The limits of this process's blocking calls (CallHead, and the CLI's
// requests to node daemons): their connect (Timeouts::connect_timeout), a
// head's reply (head_call_timeout, also the limit on sending the request), a
// node's reply (node_call_timeout) and the margin over a parked request's own
// timeout (parked_reply_margin). Timeouts::FromEnv() until SetCallTimeouts is
// called (a driver's or worker's runtime sets its options' Timeouts at start;
// tests shrink them there). Thread-safe.
void SetCallTimeouts(const Timeouts& timeouts);
Timeouts CallTimeouts();

// One blocking request to the head: sends a hello and the envelope `fill`
// builds, returns the reply's words. A head silent for `reply_timeout`
// (nullopt: CallTimeouts().head_call_timeout) is DeadlineExceeded (requests
// the head parks, such as a key-value wait, pass their own timeout plus
// parked_reply_margin). The connect is bounded too, by the shorter of
// CallTimeouts().connect_timeout and `reply_timeout`: a head that accepts no
// connection (its backlog full, a host that drops SYNs) is DeadlineExceeded
// naming the address and the limit, not a hang. A head that cannot be
// reached (refused), or closes the connection before answering, is retried as
// GetHeadReconnect() says (then Unavailable naming the head when it does not
// come back).
absl::StatusOr<std::vector<capnp::word>> CallHead(
    const std::string& head_address, const std::function<void(proto::Envelope::Builder)>& fill,
    std::optional<std::chrono::milliseconds> reply_timeout = std::nullopt);

// Reads `words`, a reply from `peer` ("the head", "the node"), as an envelope
// and returns what `read` returns for it. A message Cap'n Proto cannot read
// (it throws kj::Exception, here or inside `read`) is Internal "bad reply from
// <peer>: ..."; other exceptions `read` throws pass through.
[[nodiscard]] absl::Status ReadReply(
    const std::vector<capnp::word>& words, const char* peer,
    const std::function<absl::Status(proto::Envelope::Reader)>& read);
// Internal "unexpected reply from <peer>": for a reply of the wrong kind.
[[nodiscard]] absl::Status UnexpectedReply(const char* peer);

// "auto" (or empty) means the cluster started last by `lumen start` on this machine.
absl::StatusOr<std::string> ResolveHeadAddress(const std::string& address);
absl::StatusOr<std::vector<NodeView>> QueryNodes(const std::string& head_address);
// Asks one node daemon directly (fresher than the head's last report).
absl::StatusOr<NodeView> QueryNodeStats(const std::string& node_socket);
struct PlacementGroupView {
  std::string id;
  std::string name;
  std::string strategy;
  std::string state;  // PENDING, INFEASIBLE, PREPARING, CREATED, REMOVED
  std::string error;  // why it waits
  std::vector<std::map<std::string, double>> bundles;
  std::vector<std::string> bundle_nodes;  // hex node ids, "" while unplaced
};
absl::StatusOr<std::vector<PlacementGroupView>> QueryPlacementGroups(
    const std::string& head_address);

// One row per actor, task or object (`what`) owned by the processes of the node
// at `node_address`; each row is (column, value) pairs.
using StateRow = std::vector<std::pair<std::string, std::string>>;
absl::StatusOr<std::vector<StateRow>> QueryNodeState(const std::string& node_address,
                                                     const std::string& what);
// The rows of a node's stateRows answer.
std::vector<StateRow> StateRowsOf(proto::Envelope::Reader env);
// "PACK", "SPREAD", "STRICT_PACK" or "STRICT_SPREAD".
const char* PlacementStrategyName(proto::PlacementStrategy strategy);

// The task events the node daemon at `node_address` keeps (its processes'
// and its own), for `lumen timeline`.
// One line of a worker's log file, as `lumen logs` gets it from a node.
struct WorkerLogLineView {
  int pid = 0;
  bool is_stderr = false;
  std::string text;
  std::string name;  // the actor the worker holds, or ""
};

struct NodeTaskEvents {
  NodeId node;
  std::vector<TaskEvent> events;
  uint64_t dropped = 0;  // events lost to full buffers on that node
};
absl::StatusOr<NodeTaskEvents> QueryTaskEvents(const std::string& node_address);
// `lumen logs`: the end (at most `max_bytes` per file) of the log files of the
// node's workers: all of them, one (`pid` != 0) or one actor's (`actor`).
absl::StatusOr<std::vector<WorkerLogLineView>> QueryWorkerLogs(const std::string& node_address,
                                                               int pid, const std::string& actor,
                                                               uint64_t max_bytes);

// The alive node on this host that a driver should attach to.
absl::StatusOr<NodeView> FindLocalNode(const std::string& address);

}  // namespace lumen::runtime
