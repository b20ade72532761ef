#include "core/cli/logs_command.h"

#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "lumen/common/head_client.h"

namespace lumen::cli {

absl::Status RunLogs(const LogsOptions& options) {
  if (options.head.token) runtime::SetHeadToken(*options.head.token);
  auto head = runtime::ResolveHeadAddress(options.head.address);
  if (!head.ok()) return head.status();
  auto nodes = runtime::QueryNodes(*head);
  if (!nodes.ok()) return nodes.status();
  size_t matched_nodes = 0, files = 0;
  for (const auto& n : *nodes) {
    std::string id = n.id.Hex();
    if (!options.node.empty() && id.rfind(options.node, 0) != 0) continue;
    ++matched_nodes;
    if (!n.alive) continue;
    auto lines = runtime::QueryWorkerLogs(n.address, options.worker, options.actor,
                                          options.max_bytes);
    if (!lines.ok()) {
      std::cerr << "lumen: node " << id.substr(0, 12)
                << " did not answer: " << lines.status().message() << "\n";
      continue;
    }
    // The lines come file by file (stdout, then stderr, per worker): a header
    // starts each file.
    int pid = -1;
    bool is_stderr = false;
    for (const auto& line : *lines) {
      if (line.pid != pid || line.is_stderr != is_stderr) {
        pid = line.pid;
        is_stderr = line.is_stderr;
        ++files;
        std::cout << "==> node " << id.substr(0, 12) << ", worker pid " << pid
                  << (line.name.empty() ? "" : absl::StrCat(", actor ", line.name)) << ", "
                  << (is_stderr ? "stderr" : "stdout") << " <==\n";
      }
      std::cout << line.text << "\n";
    }
  }
  if (!options.node.empty() && matched_nodes == 0) {
    return absl::NotFoundError(absl::StrCat("no node's id starts with '", options.node,
                                            "' (see lumen list nodes)"));
  }
  if (files == 0 && (options.worker != 0 || !options.actor.empty())) {
    return absl::NotFoundError(
        options.worker != 0
            ? absl::StrCat("no log lines of worker ", options.worker, " on ",
                           options.node.empty() ? "any node" : "that node")
            : absl::StrCat("no log lines of actor '", options.actor, "' on ",
                           options.node.empty() ? "any node" : "that node"));
  }
  return absl::OkStatus();
}

}  // namespace lumen::cli
