#include "core/cli/stop_command.h"

#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>
#include <vector>

#include "lumen/common/process.h"
#include "lumen/common/timeouts.h"

namespace lumen::cli {

absl::Status RunStop() {
  int stopped = 0;
  std::error_code ec;
  std::vector<std::filesystem::path> sessions;
  for (const auto& entry : std::filesystem::directory_iterator(TempRoot(), ec)) {
    if (entry.path().filename().string().rfind("lumen-session-", 0) == 0 &&
        std::filesystem::exists(entry.path() / "cluster.pids", ec)) {
      sessions.push_back(entry.path());
    }
  }
  // Each process gets Timeouts::stop_wait (LUMEN_STOP_WAIT_MS) to exit after
  // SIGTERM, then SIGKILL.
  const auto stop_wait = Timeouts::FromEnv().stop_wait;
  for (const auto& session : sessions) {
    std::ifstream in(session / "cluster.pids");
    std::vector<pid_t> pids;
    for (pid_t pid; in >> pid;) pids.push_back(pid);
    // Node daemons (listed last) first, then the head.
    for (auto it = pids.rbegin(); it != pids.rend(); ++it) {
      if (!ProcessAlive(*it)) continue;
      ::kill(*it, SIGTERM);
      auto deadline = std::chrono::steady_clock::now() + stop_wait;
      while (ProcessAlive(*it) && std::chrono::steady_clock::now() < deadline) {
        // Not our child: there is nothing to wait on but its /proc entry.
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      if (ProcessAlive(*it)) ::kill(*it, SIGKILL);
      ++stopped;
    }
    std::filesystem::remove_all(session, ec);
  }
  std::cout << "Stopped " << stopped << " Lumen process" << (stopped == 1 ? "" : "es") << ".\n";
  return absl::OkStatus();
}

}  // namespace lumen::cli
