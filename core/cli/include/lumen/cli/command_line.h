// The grammar of the `lumen` command: which subcommands and flags exist, their
// generated --help, and the options a command line parses to. Nothing here
// starts or contacts a cluster, so the grammar is unit-tested on its own
// (test/cli/command_line_test.cc).
//
//   lumen::cli::ParseResult parsed = lumen::cli::ParseCommandLine(argc, argv);
//   if (!parsed.command) {               // --help, or a usage error
//     (parsed.exit_code == 0 ? std::cout : std::cerr) << parsed.output;
//     return parsed.exit_code;           // 0 after --help, 2 for a bad command line
//   }
//   if (parsed.command->kind == lumen::cli::CommandKind::kStart) ...
//
// Usage errors name what is wrong: an unknown flag or subcommand, a flag's bad
// value (`--num-cpus abc`, `--resources '{bad json'`), a missing argument. As in
// Ray's CLI, they exit with code 2.
//
// Stateless: safe to call from any thread.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace lumen::cli {

// `lumen start`: a head and its node (--head), or one more node joined to a
// head (--address). A flag that was not given is empty (nullopt), so that the
// defaults stay with the cluster code.
struct StartOptions {
  bool head = false;
  std::string address;                        // --address HOST:PORT|auto: the head to join
  std::optional<int> port;                    // --port: the head's port (0: any free one)
  std::optional<std::string> host;            // --host: the address the head listens on
  std::optional<std::string> node_ip_address; // --node-ip-address: where this node listens
  std::optional<double> num_cpus;             // --num-cpus, >= 0
  std::optional<double> num_gpus;             // --num-gpus, >= 0
  std::optional<double> memory;               // --memory, bytes, >= 0
  std::optional<uint64_t> object_store_memory;  // --object-store-memory, bytes
  std::optional<uint64_t> memory_budget;        // --memory-budget, bytes (memory monitor)
  std::optional<std::string> object_spilling_directory;  // --object-spilling-directory
  std::map<std::string, double> resources;    // --resources '{"name": qty, ...}'
  std::optional<std::string> token;           // --token: the cluster's token
  std::optional<int> metrics_port;            // --metrics-port: GET /metrics on the head
  std::optional<std::string> metrics_host;    // --metrics-host (default 127.0.0.1)
  // --head-persistence wal|none: the head's tables survive its restart (wal,
  // the default) or not (doc/reliability.md, item 6).
  std::optional<std::string> head_persistence;
  std::optional<std::string> external_storage;  // --external-storage redis://HOST:PORT
};

// The head a query (`lumen status`, `lumen list`) asks.
struct HeadQueryOptions {
  std::string address;               // --address HOST:PORT|auto; empty: as "auto"
  std::optional<std::string> token;  // --token
};

// `lumen list <what>`.
struct ListOptions {
  std::string what;  // nodes | actors | tasks | objects | placement-groups
  HeadQueryOptions head;
};

// `lumen memory [--top N]`.
struct MemoryOptions {
  int top = 20;  // --top: how many of the largest objects to list
  HeadQueryOptions head;
};

// `lumen timeline FILE`.
struct TimelineOptions {
  std::string file;  // where the Chrome trace (JSON) is written
  HeadQueryOptions head;
};

// `lumen logs [--node N] [--worker PID | --actor NAME]`.
struct LogsOptions {
  std::string node;   // --node: a node id or its prefix (as `lumen list nodes` shows); empty: all
  int worker = 0;     // --worker PID (0: every worker)
  std::string actor;  // --actor NAME: the worker(s) of this actor
  uint64_t max_bytes = 1u << 20;  // --tail-bytes: at most this much of the end of each file
  HeadQueryOptions head;
};

// `lumen microbenchmark`.
struct MicrobenchmarkArgs {
  bool quick = false;  // --quick: shorter runs and smaller objects
  // --client SECONDS (internal, hidden from --help): run as one of the extra
  // driver processes of multi_client_tasks_async for that long.
  std::optional<double> client_seconds;
  // --scale: how costs grow with the work (bench/scale_metrics.h) instead of
  // Ray's metrics; --scale-max-tasks N caps its largest drain (default 1M);
  // --out DIR is where it writes scale.csv and scale.png (default: the build
  // folder, the one above this binary's bin/).
  bool scale = false;
  long scale_max_tasks = 1000000;
  // --scale-only LIST: the experiments to run, comma-separated (drain,
  // actors, puts, store_puts, nodes); empty: all.
  std::string scale_only;
  std::string out_dir;
  bool task_events = false;  // --task-events: only the cost of task events (on vs off)
};

enum class CommandKind { kStart, kStop, kStatus, kList, kMemory, kTimeline, kLogs, kMicrobenchmark };

// A command line that parsed: the subcommand and its options (only the member
// for `kind` is meaningful).
struct CommandLine {
  CommandKind kind = CommandKind::kStatus;
  StartOptions start;
  HeadQueryOptions status;
  ListOptions list;
  MemoryOptions memory;
  TimelineOptions timeline;
  LogsOptions logs;
  MicrobenchmarkArgs microbenchmark;
};

struct ParseResult {
  // Set when a command is to run; empty after --help or a usage error.
  std::optional<CommandLine> command;
  // When `command` is empty: 0 after --help (print `output` to stdout), 2 after
  // a usage error (print `output`, which names the problem, to stderr).
  int exit_code = 0;
  std::string output;
};

// Parses argv[1..argc) (argv[0] is the program). `argv` is read, not kept.
ParseResult ParseCommandLine(int argc, const char* const* argv);
// The same for a list of arguments without the program name.
ParseResult ParseCommandLine(const std::vector<std::string>& args);

}  // namespace lumen::cli
