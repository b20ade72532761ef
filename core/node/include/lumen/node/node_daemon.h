// The node daemon: one per machine (or per `lumen start` on one machine). It
// owns the node's resources and local scheduler (worker leases), its worker
// pool, and its shared-memory object store, and reports to the head.
//
//   lumen::node::NodeDaemonOptions options;
//   options.session_dir = dir;
//   options.head_address = "10.0.0.1:6379";
//   options.resources = {{"CPU", 8}};
//   return lumen::node::RunNodeDaemon(options);   // until SIGTERM or the parent exits
//
// Threads: everything runs on one event loop (the calling thread).
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "lumen/common/timeouts.h"

namespace lumen::node {

// Hooks for tests only; production code leaves them at their defaults.
struct NodeDaemonTesting {
  // Refuse this many placement-group bundle prepares (rollback tests).
  int refuse_prepares = 0;
};

struct NodeDaemonOptions {
  std::string session_dir;
  std::string head_address;        // host:port of the head service
  std::string host = "127.0.0.1";  // the IP this node's daemon and workers listen on
  std::map<std::string, double> resources;
  uint64_t object_store_bytes = 0;
  // Where spill files go (a fresh subdirectory of it); empty: the session
  // directory.
  std::string spill_dir;
  int parent_fd = -1;  // EOF on it: the driver that started us died; exit
  int ready_fd = -1;   // our socket path is written here once we serve
  bool remove_session_dir = false;  // at exit (embedded clusters)
  int prestart_workers = -1;  // -1: the CPU count
  // The memory monitor (doc/reliability.md, item 14): the bytes of resident
  // anonymous memory the node's workers may use together (0: off), how often
  // it is sampled, and how long lease grants pause after a kill (doubled for
  // each kill in a row, up to 30 s).
  uint64_t memory_budget_bytes = 0;
  std::chrono::milliseconds memory_monitor_period{250};
  std::chrono::milliseconds memory_kill_backoff{1000};
  // Report period, worker idle timeout, connect and retry delays.
  Timeouts timeouts = Timeouts::FromEnv();
  NodeDaemonTesting testing;
};

// Runs until told to stop (SIGTERM/SIGINT, parent gone); returns the exit code.
int RunNodeDaemon(const NodeDaemonOptions& options);

// Test only: hooks that every later RunNodeDaemon of this process uses instead
// of options.testing (a test binary re-executed as a node daemon sets them
// before lumen::Init runs the daemon).
void TEST_SetNodeDaemonTesting(const NodeDaemonTesting& testing);

}  // namespace lumen::node
