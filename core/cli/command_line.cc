#include "lumen/cli/command_line.h"

#include <cmath>
#include <sstream>

#include <CLI/CLI.hpp>

#include "lumen/cli/resources_json.h"

namespace lumen::cli {
namespace {

constexpr const char* kTokenNote =
    "A head listening beyond loopback requires its token on every connection: pass it\n"
    "with --token TOKEN or LUMEN_TOKEN=TOKEN (drivers: Config::token). On the head's\n"
    "machine, --address auto reads it from the session's token file.";

// A number >= 0 that is finite (CLI::NonNegativeNumber lets "nan" through).
const CLI::Validator kNonNegative(
    [](std::string& text) -> std::string {
      double v = 0;
      if (!CLI::detail::lexical_cast(text, v)) return "needs a number, got '" + text + "'";
      if (!std::isfinite(v) || v < 0) return "needs a non-negative number, got '" + text + "'";
      return "";
    },
    "");

// A whole number of bytes (CLI11 would wrap "-5" around to 2^64 - 5).
const CLI::Validator kByteCount(
    [](std::string& text) -> std::string {
      bool digits = !text.empty() && text.size() <= 19 &&
                    text.find_first_not_of("0123456789") == std::string::npos;
      return digits ? "" : "needs a whole number of bytes, got '" + text + "'";
    },
    "");

// The internal --client flag is hidden, and CLI11 names hidden options "", so
// its message names it itself.
const CLI::Validator kClientSeconds(
    [](std::string& text) -> std::string {
      double v = 0;
      if (CLI::detail::lexical_cast(text, v) && std::isfinite(v) && v >= 0) return "";
      return "--client needs a non-negative number of seconds, got '" + text + "'";
    },
    "");

// A flat JSON object of numbers; the message says what is wrong with it.
const CLI::Validator kResourcesJson(
    [](std::string& text) -> std::string {
      auto parsed = ParseResourcesJson(text);
      return parsed.ok() ? "" : std::string(parsed.status().message());
    },
    "");

ParseResult UsageError(const std::string& command, const std::string& message) {
  ParseResult result;
  result.exit_code = 2;
  result.output = command + ": error: " + message + "\nRun '" + command + " --help' to see " +
                  (command == "lumen" ? "the commands" : "its flags") + ".\n";
  return result;
}

template <class T>
std::optional<T> IfGiven(const CLI::Option* option, const T& value) {
  return option->count() > 0 ? std::optional<T>(value) : std::nullopt;
}

// The `lumen` grammar: one CLI::App with a subcommand per command, writing the
// flags straight into a CommandLine (plus the few raw values converted after).
// One per parse, on the calling thread (CLI11 apps are not thread-safe).
class Grammar {
 public:
  Grammar() : app_("Lumen: start and stop clusters, show their state, run the microbenchmark.",
                   "lumen") {
    app_.require_subcommand(1);
    AddStart();
    AddStop();
    AddStatus();
    AddList();
    AddMemory();
    AddTimeline();
    AddLogs();
    AddMicrobenchmark();
    for (CLI::App* app : {&app_, start_, status_, list_, memory_cmd_, timeline_, logs_}) {
      app->footer(kTokenNote);
    }
  }

  ParseResult Parse(int argc, const char* const* argv) {
    if (argc > 1 && argv[1][0] != '-' && !IsCommand(argv[1])) {
      return UsageError("lumen", std::string("unknown command '") + argv[1] +
                                     "' (commands: start, stop, status, list, timeline, logs, microbenchmark)");
    }
    try {
      app_.parse(argc, argv);
    } catch (const CLI::ExtrasError& e) {
      return UsageError(CommandName(), Unexpected(e));
    } catch (const CLI::ParseError& e) {
      if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) {
        std::ostringstream out, err;
        app_.exit(e, out, err);  // --help: the help of the subcommand it follows
        return ParseResult{.command = std::nullopt, .exit_code = 0, .output = out.str()};
      }
      std::string message = e.what();
      if (message.rfind(": ", 0) == 0) message.erase(0, 2);  // a hidden option's empty name
      return UsageError(CommandName(), message);
    }
    return Finish();
  }

  std::string Help() const { return app_.help(); }

 private:
  void AddStart() {
    start_ = app_.add_subcommand(
        "start", "Start a head and a node daemon in the background (--head), or one more node "
                 "daemon joined to a head (--address).");
    StartOptions& o = line_.start;
    start_->add_flag("--head", o.head, "Start a head service and a node daemon on this machine");
    start_
        ->add_option("--address", o.address,
                     "Join the head at HOST:PORT (or 'auto': the head started last here); "
                     "run again for each further node on this machine")
        ->type_name("HOST:PORT");
    port_ = start_->add_option("--port", port_value_, "The head's port (default: a free one)")
                ->type_name("PORT")
                ->check(CLI::Range(0, 65535).description(""));
    host_ = start_->add_option("--host", host_value_,
                               "The address the head listens on (default 127.0.0.1; beyond "
                               "loopback a token is made, see below)")
                ->type_name("HOST");
    node_ip_ = start_->add_option("--node-ip-address", node_ip_value_,
                                  "Where this node listens (default: the address this machine "
                                  "reaches the head from)")
                   ->type_name("IP");
    num_cpus_ = start_->add_option("--num-cpus", num_cpus_value_, "CPUs this node offers")
                    ->type_name("N")
                    ->check(kNonNegative);
    num_gpus_ = start_->add_option("--num-gpus", num_gpus_value_, "GPUs this node offers")
                    ->type_name("N")
                    ->check(kNonNegative);
    memory_ = start_->add_option("--memory", memory_value_,
                                 "Bytes of memory this node offers to tasks")
                  ->type_name("BYTES")
                  ->check(kNonNegative);
    object_store_ = start_->add_option("--object-store-memory", object_store_value_,
                                       "Bytes of this node's shared-memory object store "
                                       "(default: 30% of RAM)")
                        ->type_name("BYTES")
                        ->check(kByteCount);
    memory_budget_ = start_->add_option("--memory-budget", memory_budget_value_,
                                        "Bytes of memory this node's workers may use together "
                                        "before its memory monitor kills the newest retriable "
                                        "task's worker (default: LUMEN_MEMORY_BUDGET_BYTES, "
                                        "or off)")
                         ->type_name("BYTES")
                         ->check(kByteCount);
    head_persistence_ =
        start_->add_option("--head-persistence", head_persistence_value_,
                           "With --head: keep the head's tables (nodes, jobs, named actors, "
                           "placement groups, key-value store) in a write-ahead log in the "
                           "session directory, so that a head restarted on the same port "
                           "serves them again (wal, the default), or not (none: nodes and "
                           "drivers stop when the head is lost)")
            ->type_name("wal|none")
            ->check(CLI::IsMember({"wal", "none"}));
    external_storage_ =
        start_->add_option("--external-storage", external_storage_value_,
                           "With --head: keep the head's tables in this Redis server "
                           "(redis://HOST:PORT) instead of the session directory")
            ->type_name("URL");
    spill_dir_ = start_->add_option("--object-spilling-directory", spill_dir_value_,
                                    "Where this node spills objects when its store is full "
                                    "(default: the session directory)")
                     ->type_name("DIR");
    resources_ = start_->add_option("--resources", resources_text_,
                                    "Custom resources of this node, as JSON: "
                                    "'{\"name\": qty, ...}'")
                     ->type_name("JSON")
                     ->check(kResourcesJson);
    token_start_ = start_->add_option("--token", token_start_value_,
                                      "The cluster's token (default: LUMEN_TOKEN)")
                     ->type_name("TOKEN");
    metrics_port_ = start_->add_option("--metrics-port", metrics_port_value_,
                                       "With --head: serve Prometheus metrics at "
                                       "http://HOST:PORT/metrics and the dashboard at "
                                       "http://HOST:PORT/ (0: a free port)")
                        ->type_name("PORT")
                        ->check(CLI::Range(0, 65535).description(""));
    metrics_host_ = start_->add_option("--metrics-host", metrics_host_value_,
                                       "The address the metrics listen on (default 127.0.0.1; "
                                       "beyond loopback requests need the token)")
                        ->type_name("HOST");
  }

  void AddStop() {
    stop_ = app_.add_subcommand("stop", "Stop every cluster started by `lumen start` here.");
  }

  void AddHeadQuery(CLI::App* command, HeadQueryOptions& options, CLI::Option** token,
                    std::string* token_value) {
    command
        ->add_option("--address", options.address,
                     "The head at HOST:PORT (default: LUMEN_ADDRESS, else 'auto': the head "
                     "started last here)")
        ->envname("LUMEN_ADDRESS")
        ->type_name("HOST:PORT");
    *token = command->add_option("--token", *token_value,
                                 "The cluster's token (default: LUMEN_TOKEN, or the session's "
                                 "token file)")
                 ->type_name("TOKEN");
  }

  void AddStatus() {
    status_ = app_.add_subcommand(
        "status", "Nodes (alive/dead), resources used/total, object stores, workers, waiting "
                  "and infeasible demand, placement groups that wait.");
    AddHeadQuery(status_, line_.status, &token_status_, &token_status_value_);
  }

  void AddList() {
    list_ = app_.add_subcommand(
        "list", "One line per node, actor, task, object or placement group (actors, tasks and "
                "objects: as their owners know them right now).");
    list_->add_option("what", line_.list.what, "What to list")
        ->required()
        ->type_name("nodes|actors|tasks|objects|placement-groups")
        ->check(CLI::IsMember({"nodes", "actors", "tasks", "objects", "placement-groups"})
                    .description(""));
    AddHeadQuery(list_, line_.list.head, &token_list_, &token_list_value_);
  }

  void AddMemory() {
    memory_cmd_ = app_.add_subcommand(
        "memory", "The object stores: per node bytes used, pinned, spilled and restored, and the "
                  "largest objects with their size, owner, call site, references and state.");
    memory_cmd_->add_option("--top", line_.memory.top, "How many of the largest objects to list "
                                                      "(default 20)")
        ->type_name("N")
        ->check(CLI::Range(0, 1000000));
    AddHeadQuery(memory_cmd_, line_.memory.head, &token_memory_, &token_memory_value_);
  }

  void AddTimeline() {
    timeline_ = app_.add_subcommand(
        "timeline", "Write the cluster's recent task events as a Chrome trace (JSON for "
                    "Perfetto or chrome://tracing): one row per worker, one slice per task.");
    timeline_->add_option("file", line_.timeline.file, "The trace file to write")
        ->required()
        ->type_name("FILE");
    AddHeadQuery(timeline_, line_.timeline.head, &token_timeline_, &token_timeline_value_);
  }

  void AddLogs() {
    logs_ = app_.add_subcommand(
        "logs", "Print what workers wrote to stdout and stderr (the per-worker files under "
                "each node's session directory), one block per file.");
    logs_->add_option("--node", line_.logs.node, "Only this node (its id or a prefix of it)")
        ->type_name("NODE");
    auto* worker = logs_->add_option("--worker", line_.logs.worker, "Only this worker process")
                       ->type_name("PID")
                       ->check(CLI::Range(1, 1 << 30));
    logs_->add_option("--actor", line_.logs.actor, "Only the worker of this actor (its name)")
        ->type_name("NAME")
        ->excludes(worker);
    logs_->add_option("--tail-bytes", line_.logs.max_bytes,
                      "At most this many bytes from the end of each file (default 1 MiB)")
        ->check(CLI::Range(uint64_t{1}, uint64_t{16} << 20));
    AddHeadQuery(logs_, line_.logs.head, &token_logs_, &token_logs_value_);
  }

  void AddMicrobenchmark() {
    bench_ = app_.add_subcommand("microbenchmark",
                                 "Ray's microbenchmark metrics, measured on a local cluster.");
    bench_->add_flag("--quick", line_.microbenchmark.quick,
                     "Shorter runs and smaller objects (under 30 s)");
    bench_->add_flag("--task-events", line_.microbenchmark.task_events,
                     "Only measure what task events cost: task and actor-call rates with "
                     "events on and off");
    // Internal: how the benchmark starts its extra driver processes.
    client_ = bench_->add_option("--client", client_value_)->group("")->check(kClientSeconds);
    bench_->add_flag("--scale", line_.microbenchmark.scale,
                     "How costs grow: up to 1M queued tasks, 10k actors, 1M puts, 100 nodes; "
                     "writes scale.csv and scale.png");
    bench_->add_option("--scale-max-tasks", line_.microbenchmark.scale_max_tasks,
                       "The largest drain of --scale (default 1000000)")
        ->check(CLI::Range(10000L, 100000000L));
    bench_->add_option("--scale-only", line_.microbenchmark.scale_only,
                       "Only these --scale experiments, comma-separated: drain, actors, puts, store_puts, "
                       "nodes (default: all)");
    bench_->add_option("--out", line_.microbenchmark.out_dir,
                       "Where --scale writes scale.csv and scale.png (default: the build folder)");
  }

  bool IsCommand(const std::string& word) const {
    for (const CLI::App* sub : {start_, stop_, status_, list_, memory_cmd_, timeline_, logs_, bench_}) {
      if (sub->check_name(word)) return true;
    }
    return false;
  }

  // "unknown flag '--bogus-flag'" for the first argument nothing accepted, in
  // the order given (CLI11's own message lists them backwards).
  std::string Unexpected(const CLI::ExtrasError& e) const {
    for (const CLI::App* sub : {start_, stop_, status_, list_, memory_cmd_, timeline_, logs_, bench_}) {
      if (!sub->parsed()) continue;
      std::vector<std::string> rest = sub->remaining();
      if (rest.empty()) break;
      if (rest[0].rfind("-", 0) == 0) {
        return "unknown flag '" + rest[0].substr(0, rest[0].find('=')) + "'";
      }
      return "unexpected argument '" + rest[0] + "'";
    }
    return e.what();
  }

  // The deepest subcommand given, as the user would type it ("lumen start").
  std::string CommandName() const {
    std::string name = "lumen";
    for (const CLI::App* sub : {start_, stop_, status_, list_, memory_cmd_, timeline_, logs_, bench_}) {
      if (sub->parsed()) name += " " + sub->get_name();
    }
    return name;
  }

  ParseResult Finish() {
    CommandLine& line = line_;
    if (start_->parsed()) {
      line.kind = CommandKind::kStart;
      StartOptions& o = line.start;
      if (!o.head && o.address.empty()) {
        return UsageError("lumen start", "start needs --head or --address HOST:PORT");
      }
      o.port = IfGiven(port_, port_value_);
      o.host = IfGiven(host_, host_value_);
      o.node_ip_address = IfGiven(node_ip_, node_ip_value_);
      o.num_cpus = IfGiven(num_cpus_, num_cpus_value_);
      o.num_gpus = IfGiven(num_gpus_, num_gpus_value_);
      o.memory = IfGiven(memory_, memory_value_);
      o.object_store_memory = IfGiven(object_store_, object_store_value_);
      o.memory_budget = IfGiven(memory_budget_, memory_budget_value_);
      o.object_spilling_directory = IfGiven(spill_dir_, spill_dir_value_);
      o.token = IfGiven(token_start_, token_start_value_);
      o.metrics_port = IfGiven(metrics_port_, metrics_port_value_);
      o.metrics_host = IfGiven(metrics_host_, metrics_host_value_);
      o.head_persistence = IfGiven(head_persistence_, head_persistence_value_);
      o.external_storage = IfGiven(external_storage_, external_storage_value_);
      if ((o.head_persistence || o.external_storage) && !o.head) {
        return UsageError("lumen start", "--head-persistence and --external-storage need --head");
      }
      if (o.external_storage && o.external_storage->rfind("redis://", 0) != 0) {
        return UsageError("lumen start", "--external-storage wants redis://HOST:PORT");
      }
      if ((o.metrics_port || o.metrics_host) && !o.head) {
        return UsageError("lumen start", "--metrics-port and --metrics-host need --head");
      }
      if (resources_->count() > 0) {
        auto parsed = ParseResourcesJson(resources_text_);
        if (!parsed.ok()) {
          return UsageError("lumen start",
                            "--resources: " + std::string(parsed.status().message()));
        }
        o.resources = *parsed;
      }
    } else if (stop_->parsed()) {
      line.kind = CommandKind::kStop;
    } else if (status_->parsed()) {
      line.kind = CommandKind::kStatus;
      line.status.token = IfGiven(token_status_, token_status_value_);
    } else if (list_->parsed()) {
      line.kind = CommandKind::kList;
      line.list.head.token = IfGiven(token_list_, token_list_value_);
    } else if (memory_cmd_->parsed()) {
      line.kind = CommandKind::kMemory;
      line.memory.head.token = IfGiven(token_memory_, token_memory_value_);
    } else if (timeline_->parsed()) {
      line.kind = CommandKind::kTimeline;
      line.timeline.head.token = IfGiven(token_timeline_, token_timeline_value_);
    } else if (logs_->parsed()) {
      line.kind = CommandKind::kLogs;
      line.logs.head.token = IfGiven(token_logs_, token_logs_value_);
    } else {
      line.kind = CommandKind::kMicrobenchmark;
      line.microbenchmark.client_seconds = IfGiven(client_, client_value_);
    }
    return ParseResult{.command = line, .exit_code = 0, .output = ""};
  }

  CLI::App app_;
  CommandLine line_;
  CLI::App* start_ = nullptr;
  CLI::App* stop_ = nullptr;
  CLI::App* status_ = nullptr;
  CLI::App* list_ = nullptr;
  CLI::App* memory_cmd_ = nullptr;
  CLI::App* timeline_ = nullptr;
  CLI::App* logs_ = nullptr;
  CLI::App* bench_ = nullptr;
  // Flags whose absence matters (StartOptions keeps them optional): the option
  // and the raw value CLI11 writes.
  CLI::Option* port_ = nullptr;
  int port_value_ = 0;
  CLI::Option* host_ = nullptr;
  std::string host_value_;
  CLI::Option* node_ip_ = nullptr;
  std::string node_ip_value_;
  CLI::Option* num_cpus_ = nullptr;
  double num_cpus_value_ = 0;
  CLI::Option* num_gpus_ = nullptr;
  double num_gpus_value_ = 0;
  CLI::Option* memory_ = nullptr;
  double memory_value_ = 0;
  CLI::Option* object_store_ = nullptr;
  uint64_t object_store_value_ = 0;
  CLI::Option* head_persistence_ = nullptr;
  std::string head_persistence_value_;
  CLI::Option* external_storage_ = nullptr;
  std::string external_storage_value_;
  CLI::Option* memory_budget_ = nullptr;
  uint64_t memory_budget_value_ = 0;
  CLI::Option* spill_dir_ = nullptr;
  std::string spill_dir_value_;
  CLI::Option* resources_ = nullptr;
  std::string resources_text_;
  CLI::Option* token_start_ = nullptr;
  CLI::Option* metrics_port_ = nullptr;
  int metrics_port_value_ = 0;
  CLI::Option* metrics_host_ = nullptr;
  std::string metrics_host_value_;
  std::string token_start_value_;
  CLI::Option* token_status_ = nullptr;
  std::string token_status_value_;
  CLI::Option* token_list_ = nullptr;
  std::string token_list_value_;
  CLI::Option* token_memory_ = nullptr;
  std::string token_memory_value_;
  CLI::Option* token_timeline_ = nullptr;
  std::string token_timeline_value_;
  CLI::Option* token_logs_ = nullptr;
  std::string token_logs_value_;
  CLI::Option* client_ = nullptr;
  double client_value_ = 0;
};

}  // namespace

ParseResult ParseCommandLine(int argc, const char* const* argv) {
  std::vector<std::string> args(argv + (argc > 0 ? 1 : 0), argv + argc);
  return ParseCommandLine(args);
}

ParseResult ParseCommandLine(const std::vector<std::string>& args) {
  Grammar grammar;
  if (args.empty()) {
    return ParseResult{.command = std::nullopt, .exit_code = 2, .output = grammar.Help()};
  }
  // `lumen help [COMMAND]` is `lumen [COMMAND] --help`.
  std::vector<std::string> words = args;
  if (words[0] == "help") {
    words.erase(words.begin());
    words.push_back("--help");
  }
  std::vector<const char*> argv = {"lumen"};
  for (const auto& w : words) argv.push_back(w.c_str());
  return grammar.Parse(static_cast<int>(argv.size()), argv.data());
}

}  // namespace lumen::cli
