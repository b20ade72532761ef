// The node daemon: one per machine (or per `lumen start` on one machine). It owns
// the node's resources and local scheduler (worker leases), its worker pool, and
// its shared-memory object store, and reports to the head.
//
// Threads: everything runs on one event loop (the process's main thread).
#pragma once

#include <map>
#include <string>

namespace lumen::runtime {

struct NodeDaemonOptions {
  std::string session_dir;
  std::string head_address;  // host:port of the head service
  std::string host = "127.0.0.1";  // the IP this node's daemon and workers listen on
  std::map<std::string, double> resources;
  uint64_t object_store_bytes = 0;
  int parent_fd = -1;  // EOF on it: the driver that started us died; exit
  int ready_fd = -1;   // our socket path is written here once we serve
  bool remove_session_dir = false;  // at exit (embedded clusters)
  // Reports to the head (its health check) this often.
  int report_period_ms = 500;
  int prestart_workers = -1;  // -1: the CPU count
  // Idle workers beyond the pool size (the prestart count) exit after this long.
  int worker_idle_timeout_ms = 10000;
};

// Runs until told to stop (SIGTERM/SIGINT, parent gone); returns the exit code.
int RunNodeDaemon(const NodeDaemonOptions& options);

}  // namespace lumen::runtime
