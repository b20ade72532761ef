// The head service (control store): one per cluster. Holds the node table and
// each node's last report, and a small key-value store for rendezvous data
// (kv_store.h).
//
// Threads: one event loop (the process's main thread).
#pragma once

#include <string>

#include "core/runtime/kv_store.h"
#include "lumen/common/address.h"

namespace lumen::runtime {

// What clients may make the head hold, besides the key-value store. Each comes
// from its environment variable when set; an over-limit request gets an error
// that names the limit.
struct HeadLimits {
  size_t max_named_actors = 100000;             // LUMEN_MAX_NAMED_ACTORS
  size_t max_placement_groups = 10000;          // LUMEN_MAX_PLACEMENT_GROUPS (not removed)
  size_t max_bundles_per_group = 10000;         // LUMEN_MAX_BUNDLES_PER_GROUP
  size_t max_name_bytes = 1024;                 // actor and placement-group names
  size_t max_parked_requests_per_connection = 10000;  // LUMEN_MAX_PARKED_REQUESTS

  static HeadLimits FromEnv();
};

struct HeadOptions {
  std::string host = "127.0.0.1";
  int port = 0;         // 0: pick a free port
  int parent_fd = -1;   // EOF on it: the driver that started us died; exit
  int ready_fd = -1;    // "ready HOST:PORT" is written here once we serve
  std::string session_dir;
  // Required in every hello when the head listens beyond loopback.
  std::string token;
  // A node that misses `health_check_failure_threshold` reports in a row, one
  // expected every `health_check_period_ms`, is declared dead.
  int health_check_period_ms = 500;
  int health_check_failure_threshold = 5;
  // Limits of the key-value store; the LUMEN_KV_* environment variables, when
  // set, override them (kv_store.h).
  KvLimits kv_limits;
};

// True for 127.0.0.0/8, ::1 and "localhost".
using lumen::IsLoopbackHost;

int RunHeadService(const HeadOptions& options);

}  // namespace lumen::runtime
