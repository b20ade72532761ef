// A ProcessLauncher for node tests that starts nothing: it records launches
// and kills, and hands out the exits a test scripts in `exits`.
#pragma once

#include <set>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/node/process_launcher.h"

namespace lumen::node::testing {

class FakeLauncher : public ProcessLauncher {
 public:
  absl::StatusOr<pid_t> Launch(const WorkerLaunch& launch) override {
    if (fail) return absl::InternalError("exec failed");
    launched.push_back(launch);
    if (maybe_started > 0) {
      --maybe_started;
      return absl::AbortedError("the template took the request, then no answer");
    }
    return next_pid++;
  }
  void Kill(pid_t pid) override { killed.insert(pid); }
  bool IsExiting(pid_t) override { return false; }
  bool IsAlive(pid_t pid) override { return !killed.contains(pid); }
  std::vector<ProcessExit> Reap() override { return std::exchange(exits, {}); }

  bool fail = false;                // Launch fails while set
  int maybe_started = 0;            // this many next Launches return Aborted
  pid_t next_pid = 1000;
  std::vector<WorkerLaunch> launched;
  std::set<pid_t> killed;
  std::vector<ProcessExit> exits;   // returned (and cleared) by the next Reap
};

}  // namespace lumen::node::testing
