// Helpers for the integration tests: a cluster per test case, waiting on
// conditions with a deadline, and looking at what a cluster left behind.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "lumen/lumen.h"

namespace lumen::test {

// Starts an embedded cluster for one test case and shuts it down at scope exit.
class ScopedCluster {
 public:
  explicit ScopedCluster(Config config = DefaultConfig());
  ~ScopedCluster();
  static Config DefaultConfig();  // 2 CPUs, 512 MiB store
  std::string session_dir() const;

 private:
  std::string session_dir_;
};

// Polls `condition` until it holds or `timeout` passes; returns whether it held.
bool WaitUntil(const std::function<bool()>& condition,
               std::chrono::milliseconds timeout = std::chrono::seconds(20));

// Children of `pid` (direct), from /proc.
std::vector<pid_t> ChildPids(pid_t pid);
// Every live process whose environment or command line mentions `needle`.
std::vector<pid_t> ProcessesMentioning(const std::string& needle);
// The session directories under $TMPDIR (or /tmp).
std::set<std::string> SessionDirs();
// Entries of /dev/shm whose name contains "lumen".
std::set<std::string> LumenShmEntries();

// Runs a command, returns its exit status and fills `output` with stdout+stderr.
int RunCommand(const std::string& command, std::string* output);

// Runs `lumen stop` (the given CLI) at scope exit, so a test that started a
// cluster with `lumen start` leaves nothing running even when it fails midway.
class StopClustersAtExit {
 public:
  explicit StopClustersAtExit(std::string cli) : cli_(std::move(cli)) {}
  ~StopClustersAtExit() {
    std::string ignored;
    RunCommand(cli_ + " stop", &ignored);
  }

 private:
  std::string cli_;
};

}  // namespace lumen::test
