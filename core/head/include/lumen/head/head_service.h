// The head service (control store): one per cluster. It keeps the node table
// and its health checks, the job table, the placement groups (two-phase
// commit in lumen/scheduler/placement_group_manager.h), the named-actor
// directory (lumen/actors/named_actor_directory.h) and a small key-value store
// for rendezvous data.
//
//   lumen::head::HeadOptions options;          // timeouts and limits from the environment
//   options.port = 6379;
//   return lumen::head::RunHeadService(options);   // serves until SIGTERM or parent EOF
//
// Threads: one event loop (the calling thread).
#pragma once

#include <cstddef>
#include <string>

#include "lumen/common/timeouts.h"
#include "lumen/head/kv_limits.h"

namespace lumen::head {

// What clients may make the head hold, besides the key-value store. Each comes
// from its environment variable when set; an over-limit request gets an error
// that names the limit.
struct HeadLimits {
  size_t max_named_actors = 100000;             // LUMEN_MAX_NAMED_ACTORS
  size_t max_placement_groups = 10000;          // LUMEN_MAX_PLACEMENT_GROUPS (not removed)
  size_t max_bundles_per_group = 10000;         // LUMEN_MAX_BUNDLES_PER_GROUP
  size_t max_name_bytes = 1024;                 // actor and placement-group names
  size_t max_parked_requests_per_connection = 10000;  // LUMEN_MAX_PARKED_REQUESTS
  // LUMEN_PLACEMENT_GROUP_ONE_STEP: 0 puts every group through both phases,
  // also one on a single node (PlacementGroupLimits::one_step_single_node).
  size_t placement_group_one_step = 1;

  static HeadLimits FromEnv();
};

struct HeadOptions {
  std::string host = "127.0.0.1";
  int port = 0;         // 0: pick a free port
  int parent_fd = -1;   // EOF on it: the driver that started us died; exit
  int ready_fd = -1;    // "ready HOST:PORT" is written here once we serve
  std::string session_dir;
  // Required in every hello when the head listens beyond loopback (and on
  // every HTTP request when the metrics server does).
  std::string token;
  // GET /metrics (Prometheus) on metrics_host:metrics_port; -1: off, 0: any
  // free port. The address it serves on goes to <session_dir>/metrics_address.
  std::string metrics_host = "127.0.0.1";
  int metrics_port = -1;
  // The health checks (a node that misses `health_check_failure_threshold`
  // reports in a row, one expected every `health_check_period`, is declared
  // dead) and every other head timeout. Defaults: the environment.
  Timeouts timeouts = Timeouts::FromEnv();
  HeadLimits limits = HeadLimits::FromEnv();
  // Limits of the key-value store; the LUMEN_KV_* environment variables, when
  // set, override them (kv_limits.h).
  KvLimits kv_limits;
  // Where the head keeps its tables (nodes, ended jobs, named actors,
  // placement groups, key-value store) so that a head restarted on the same
  // port after a crash serves them again (doc/reliability.md, item 6):
  //   "wal"  (default) a write-ahead log with snapshots in `state_dir`;
  //   "none" nothing: nodes and drivers that lose this head stop with an error.
  // LUMEN_HEAD_PERSISTENCE, `lumen start --head-persistence`.
  std::string persistence = "wal";
  // redis://HOST:PORT: the tables live in that Redis server instead (wins over
  // `persistence`). LUMEN_HEAD_EXTERNAL_STORAGE, `lumen start --external-storage`.
  std::string external_storage;
  // The log's directory; empty: <session_dir>/head_state. LUMEN_HEAD_STATE_DIR.
  std::string state_dir;
};

// Fills the persistence fields of `options` from the environment (the
// variables above; unset ones leave the field alone).
void ReadPersistenceFromEnv(HeadOptions* options);

// Serves until SIGTERM/SIGINT or EOF on `parent_fd`; returns the process exit
// code (1 when it cannot listen).
int RunHeadService(const HeadOptions& options);

// For the fuzzer (test/fuzz/head_dispatch_fuzzer.cc): a head that listens
// nowhere (no health checks, no HTTP server) serves the connected Unix
// socket `fd` (taken over and closed) with its real hello admission, frame
// decoding and dispatch, and returns when that connection has closed.
void ServeConnectionForTesting(const HeadOptions& options, int fd);

}  // namespace lumen::head
