// Starting and stopping the processes of a local cluster: the head service and
// node daemons, either embedded in a driver (they die with it) or detached
// (`lumen start`, stopped by `lumen stop`).
#pragma once

#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace lumen::runtime {

struct ClusterSpec {
  bool start_head = true;
  bool start_node = true;      // false: the head alone
  std::string head_address;    // when not starting a head: the one to join
  std::string head_host = "127.0.0.1";
  int head_port = 0;
  std::string node_host = "127.0.0.1";  // the IP the node's daemon and workers listen on
  std::map<std::string, double> resources;  // of the node; CPU etc. filled when absent
  uint64_t object_store_bytes = 0;          // 0: 30% of RAM
  // Where the node spills objects; empty: LUMEN_OBJECT_SPILLING_DIRECTORY, or
  // the session directory.
  std::string spill_dir;
  // Embedded: the daemons watch a pipe from this process and exit with it, and
  // the session directory is removed when they stop. Detached: they start a new
  // session, log to files, and stay until `lumen stop`.
  bool embedded = true;
  std::string executable;  // the binary run as daemons (default: this one)
  std::string token;       // the cluster's token (required beyond loopback)
  // The head's GET /metrics: -1 off, 0 any free port (the head writes where it
  // serves to <session_dir>/metrics_address).
  int metrics_port = -1;
  std::string metrics_host = "127.0.0.1";
  // The node's memory monitor budget (its workers' memory together, bytes);
  // 0: LUMEN_MEMORY_BUDGET_BYTES from the environment, or off.
  uint64_t memory_budget_bytes = 0;
  // The head's persistence (HeadOptions, doc/reliability.md item 6); empty:
  // the head's default (or LUMEN_HEAD_PERSISTENCE / _EXTERNAL_STORAGE /
  // _STATE_DIR inherited from this process). head_state_dir names the
  // directory of another session's head to restart from its log.
  std::string head_persistence;        // "wal" or "none"
  std::string head_external_storage;   // redis://HOST:PORT
  std::string head_state_dir;
};

struct ClusterProcesses {
  std::string session_dir;
  std::string head_address;
  std::string node_socket;  // the node daemon's address ("host:port;/unix/path")
  std::vector<pid_t> pids;
  int parent_pipe = -1;  // embedded: closing it stops the daemons
  std::string token_file;  // where the token is kept (readable by its user only)
};

absl::StatusOr<ClusterProcesses> StartCluster(const ClusterSpec& spec);
// Embedded clusters: stops the daemons and removes the session directory.
void StopCluster(ClusterProcesses& cluster);

// If this process was started as a head or node daemon (LUMEN_ROLE), runs it and
// exits; otherwise returns.
void MaybeRunClusterProcess();

// Detected machine resources.
double DetectCpus();
double DetectGpus();
uint64_t DetectMemoryBytes();

}  // namespace lumen::runtime
