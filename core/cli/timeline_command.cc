#include "core/cli/timeline_command.h"

#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "lumen/cli/timeline.h"
#include "lumen/common/head_client.h"

namespace lumen::cli {

absl::Status RunTimeline(const TimelineOptions& options) {
  if (options.head.token) runtime::SetHeadToken(*options.head.token);
  auto head = runtime::ResolveHeadAddress(options.head.address);
  if (!head.ok()) return head.status();
  auto nodes = runtime::QueryNodes(*head);
  if (!nodes.ok()) return nodes.status();
  std::vector<runtime::NodeTaskEvents> events;
  size_t count = 0;
  uint64_t dropped = 0;
  for (const auto& n : *nodes) {
    if (!n.alive) continue;
    auto part = runtime::QueryTaskEvents(n.address);
    if (!part.ok()) {
      std::cerr << "lumen: node " << n.id.Hex().substr(0, 12)
                << " did not answer: " << part.status().message() << "\n";
      continue;
    }
    count += part->events.size();
    dropped += part->dropped;
    events.push_back(*std::move(part));
  }
  std::string trace = BuildChromeTrace(events);
  std::ofstream out(options.file, std::ios::binary | std::ios::trunc);
  out << trace;
  out.close();
  if (!out) return absl::UnavailableError(absl::StrCat("cannot write ", options.file));
  std::cout << "Wrote " << count << " task events from " << events.size() << " node"
            << (events.size() == 1 ? "" : "s") << " to " << options.file << " ("
            << trace.size() << " bytes)";
  if (dropped > 0) std::cout << "; " << dropped << " older events were dropped";
  std::cout << ".\nOpen it at https://ui.perfetto.dev or chrome://tracing.\n";
  return absl::OkStatus();
}

}  // namespace lumen::cli
