// The `lumen` command line: start and stop clusters, show their state, and run
// the microbenchmark. The grammar (flags, --help, usage errors) is in
// lumen/cli/command_line.h; each command in its own file here.
#include <cstdlib>
#include <iostream>
#include <string>

#include "absl/status/status.h"
#include "bench/microbenchmark.h"
#include "bench/scale_metrics.h"
#include "core/cli/logs_command.h"
#include "core/cli/memory_command.h"
#include "core/cli/start_command.h"
#include "core/cli/state_commands.h"
#include "core/cli/stop_command.h"
#include "core/cli/timeline_command.h"
#include "lumen/cli/command_line.h"
#include "lumen/lumen.h"

namespace {

// Exit code 1 with the error on stderr, as every command failure.
int Report(const absl::Status& status) {
  if (status.ok()) return 0;
  std::cerr << "lumen: " << status.message() << "\n";
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  // Daemons and workers of clusters started from this binary run here.
  if (const char* role = std::getenv("LUMEN_ROLE"); role != nullptr && *role != '\0') {
    lumen::Init(argc, argv);
  }
  lumen::cli::ParseResult parsed = lumen::cli::ParseCommandLine(argc, argv);
  if (!parsed.command) {
    (parsed.exit_code == 0 ? std::cout : std::cerr) << parsed.output;
    return parsed.exit_code;
  }
  const lumen::cli::CommandLine& line = *parsed.command;
  switch (line.kind) {
    case lumen::cli::CommandKind::kStart:
      return Report(lumen::cli::RunStart(line.start));
    case lumen::cli::CommandKind::kStop:
      return Report(lumen::cli::RunStop());
    case lumen::cli::CommandKind::kStatus:
      return Report(lumen::cli::RunStatus(line.status));
    case lumen::cli::CommandKind::kList:
      return Report(lumen::cli::RunList(line.list));
    case lumen::cli::CommandKind::kMemory:
      return Report(lumen::cli::RunMemory(line.memory));
    case lumen::cli::CommandKind::kTimeline:
      return Report(lumen::cli::RunTimeline(line.timeline));
    case lumen::cli::CommandKind::kLogs:
      return Report(lumen::cli::RunLogs(line.logs));
    case lumen::cli::CommandKind::kMicrobenchmark:
      if (line.microbenchmark.scale) {
        return lumen::bench::RunScaleBenchmark(
            {.quick = line.microbenchmark.quick,
             .max_tasks = line.microbenchmark.scale_max_tasks,
             .only = line.microbenchmark.scale_only,
             .out_dir = line.microbenchmark.out_dir.empty() ? lumen::bench::DefaultScaleOutDir()
                                                            : line.microbenchmark.out_dir});
      }
      return lumen::bench::RunMicrobenchmark(
          {.quick = line.microbenchmark.quick,
           .client_seconds = line.microbenchmark.client_seconds,
           .task_events = line.microbenchmark.task_events});
  }
  return 1;
}
