// The grammar of the `lumen` command, parsed without running anything: every
// flag that works keeps its spelling and lands in its option; an unknown flag,
// a bad value or a missing argument is a usage error (exit code 2) that names
// it; --help of each subcommand lists its flags.
#include "lumen/cli/command_line.h"

#include <stdlib.h>

#include <catch2/catch.hpp>

using Catch::Matchers::Contains;
using lumen::cli::CommandKind;
using lumen::cli::ParseCommandLine;
using lumen::cli::ParseResult;

namespace {

lumen::cli::CommandLine Parsed(const std::vector<std::string>& args) {
  ParseResult r = ParseCommandLine(args);
  INFO(r.output);
  REQUIRE(r.command.has_value());
  return *r.command;
}

// The usage error for `args`: exit code 2 and the message.
std::string UsageError(const std::vector<std::string>& args) {
  ParseResult r = ParseCommandLine(args);
  INFO(r.output);
  REQUIRE_FALSE(r.command.has_value());
  CHECK(r.exit_code == 2);
  return r.output;
}

std::string Help(const std::vector<std::string>& args) {
  ParseResult r = ParseCommandLine(args);
  REQUIRE_FALSE(r.command.has_value());
  CHECK(r.exit_code == 0);
  return r.output;
}

}  // namespace

TEST_CASE("lumen start with every flag parses to the expected options") {
  auto line = Parsed({"start", "--head", "--port", "6379", "--host", "0.0.0.0",
                      "--node-ip-address=127.0.0.1", "--num-cpus", "2", "--num-gpus=1",
                      "--memory", "1e9", "--object-store-memory", "134217728", "--resources",
                      R"({"ssd": 1, "accel": 0.5})", "--token", "secret",
                      "--object-spilling-directory", "/mnt/spill"});
  REQUIRE(line.kind == CommandKind::kStart);
  const auto& o = line.start;
  CHECK(o.head);
  CHECK(o.address.empty());
  CHECK(o.port == 6379);
  CHECK(o.host == "0.0.0.0");
  CHECK(o.node_ip_address == "127.0.0.1");
  CHECK(o.num_cpus == 2.0);
  CHECK(o.num_gpus == 1.0);
  CHECK(o.memory == 1e9);
  CHECK(o.object_store_memory == 134217728u);
  CHECK(o.object_spilling_directory == "/mnt/spill");
  CHECK(o.resources == std::map<std::string, double>{{"ssd", 1}, {"accel", 0.5}});
  CHECK(o.token == "secret");
}

TEST_CASE("lumen start leaves flags it was not given unset") {
  auto line = Parsed({"start", "--address", "auto", "--num-cpus", "1"});
  REQUIRE(line.kind == CommandKind::kStart);
  const auto& o = line.start;
  CHECK_FALSE(o.head);
  CHECK(o.address == "auto");
  CHECK(o.num_cpus == 1.0);
  CHECK_FALSE(o.port.has_value());
  CHECK_FALSE(o.host.has_value());
  CHECK_FALSE(o.node_ip_address.has_value());
  CHECK_FALSE(o.num_gpus.has_value());
  CHECK_FALSE(o.memory.has_value());
  CHECK_FALSE(o.object_store_memory.has_value());
  CHECK(o.resources.empty());
  CHECK_FALSE(o.token.has_value());
}

TEST_CASE("lumen stop, status, list and microbenchmark parse to their options") {
  ::unsetenv("LUMEN_ADDRESS");  // the default of --address, checked below
  CHECK(Parsed({"stop"}).kind == CommandKind::kStop);

  auto status = Parsed({"status", "--address", "10.0.0.1:6379", "--token", "t"});
  REQUIRE(status.kind == CommandKind::kStatus);
  CHECK(status.status.address == "10.0.0.1:6379");
  CHECK(status.status.token == "t");
  auto bare_status = Parsed({"status"});
  CHECK(bare_status.status.address.empty());
  CHECK_FALSE(bare_status.status.token.has_value());

  for (std::string what : {"nodes", "actors", "tasks", "objects", "placement-groups"}) {
    auto list = Parsed({"list", what, "--address", "h:1"});
    REQUIRE(list.kind == CommandKind::kList);
    CHECK(list.list.what == what);
    CHECK(list.list.head.address == "h:1");
  }
  CHECK(Parsed({"list", "--address=h:2", "objects"}).list.what == "objects");

  auto quick = Parsed({"microbenchmark", "--quick"});
  REQUIRE(quick.kind == CommandKind::kMicrobenchmark);
  CHECK(quick.microbenchmark.quick);
  CHECK_FALSE(quick.microbenchmark.client_seconds.has_value());
  // How the benchmark re-executes itself for its extra drivers.
  auto client = Parsed({"microbenchmark", "--client", "0.500000"});
  CHECK(client.microbenchmark.client_seconds == 0.5);
  CHECK_FALSE(Parsed({"microbenchmark"}).microbenchmark.quick);
  // --scale (issue 17): off by default; its size cap and output folder.
  CHECK_FALSE(Parsed({"microbenchmark"}).microbenchmark.scale);
  auto scale = Parsed({"microbenchmark", "--scale", "--scale-max-tasks", "300000", "--out", "/x"});
  CHECK(scale.microbenchmark.scale);
  CHECK(scale.microbenchmark.scale_max_tasks == 300000);
  CHECK(scale.microbenchmark.out_dir == "/x");
  CHECK(Parsed({"microbenchmark", "--scale"}).microbenchmark.scale_max_tasks == 1000000);
}

TEST_CASE("an unknown flag is a usage error that names it") {
  CHECK_THAT(UsageError({"start", "--head", "--bogus-flag", "3"}),
             Contains("--bogus-flag"));
  // A misspelling is not silently ignored.
  CHECK_THAT(UsageError({"start", "--head", "--num-gpu", "2"}), Contains("--num-gpu"));
  CHECK_THAT(UsageError({"stop", "--force"}), Contains("--force"));
  CHECK_THAT(UsageError({"status", "--adress", "h:1"}), Contains("--adress"));
  CHECK_THAT(UsageError({"microbenchmark", "--quik"}), Contains("--quik"));
  // Flags belong to their subcommand.
  CHECK_THAT(UsageError({"status", "--num-cpus", "2"}), Contains("--num-cpus"));
  // The message says how to see the flags.
  CHECK_THAT(UsageError({"start", "--head", "--bogus-flag"}),
             Contains("lumen start --help"));
}

TEST_CASE("a bad value is a usage error that names the flag and the value") {
  std::string cpus = UsageError({"start", "--head", "--num-cpus", "abc"});
  CHECK_THAT(cpus, Contains("--num-cpus"));
  CHECK_THAT(cpus, Contains("abc"));
  CHECK_THAT(UsageError({"start", "--head", "--num-gpus", "-1"}), Contains("--num-gpus"));
  CHECK_THAT(UsageError({"start", "--head", "--num-cpus", "nan"}), Contains("--num-cpus"));
  CHECK_THAT(UsageError({"start", "--head", "--memory", "lots"}), Contains("--memory"));
  CHECK_THAT(UsageError({"start", "--head", "--port", "http"}), Contains("--port"));
  CHECK_THAT(UsageError({"start", "--head", "--port", "70000"}), Contains("--port"));
  CHECK_THAT(UsageError({"start", "--head", "--object-store-memory", "1GB"}),
             Contains("--object-store-memory"));
  // Not wrapped around to 2^64 - 5.
  CHECK_THAT(UsageError({"start", "--head", "--object-store-memory", "-5"}),
             Contains("--object-store-memory"));
  std::string json = UsageError({"start", "--head", "--resources", "{bad json"});
  CHECK_THAT(json, Contains("--resources"));
  CHECK_THAT(json, Contains("not valid JSON at byte 1"));
  CHECK_THAT(UsageError({"start", "--head", "--num-cpus"}), Contains("--num-cpus"));
  CHECK_THAT(UsageError({"microbenchmark", "--client", "soon"}), Contains("--client"));
}

TEST_CASE("a missing or unknown command or argument is a usage error that names it") {
  CHECK_THAT(UsageError({"bogus"}), Contains("bogus"));
  CHECK_THAT(UsageError({"list", "bogus"}), Contains("bogus"));
  CHECK_THAT(UsageError({"list"}), Contains("what"));
  std::string start = UsageError({"start"});
  CHECK_THAT(start, Contains("--head"));
  CHECK_THAT(start, Contains("--address"));
  CHECK_THAT(UsageError({"start", "--head", "extra"}), Contains("extra"));
  // No command at all: the overview of the commands.
  CHECK_THAT(UsageError({}), Contains("microbenchmark"));
}

TEST_CASE("--help of each subcommand lists its flags") {
  std::string start = Help({"start", "--help"});
  for (const char* flag : {"--head", "--address", "--port", "--host", "--node-ip-address",
                           "--num-cpus", "--num-gpus", "--memory", "--object-store-memory",
                           "--object-spilling-directory", "--resources", "--token"}) {
    CHECK_THAT(start, Contains(flag));
  }
  std::string status = Help({"status", "--help"});
  CHECK_THAT(status, Contains("--address"));
  CHECK_THAT(status, Contains("--token"));
  std::string list = Help({"list", "--help"});
  CHECK_THAT(list, Contains("--address"));
  CHECK_THAT(list, Contains("placement-groups"));
  std::string bench = Help({"microbenchmark", "-h"});
  CHECK_THAT(bench, Contains("--quick"));
  CHECK_THAT(bench, !Contains("--client"));  // internal
  CHECK_THAT(Help({"stop", "--help"}), Contains("Stop every cluster"));
  // `lumen help start` is `lumen start --help`.
  CHECK(Help({"help", "start"}) == start);
  // The top level lists the commands.
  std::string top = Help({"--help"});
  for (const char* command : {"start", "stop", "status", "list", "microbenchmark"}) {
    CHECK_THAT(top, Contains(command));
  }
  CHECK(Help({"help"}) == top);
}

TEST_CASE("status and list default their --address to LUMEN_ADDRESS, a flag wins over it") {
  ::setenv("LUMEN_ADDRESS", "10.1.2.3:6379", 1);
  CHECK(Parsed({"status"}).status.address == "10.1.2.3:6379");
  CHECK(Parsed({"list", "nodes"}).list.head.address == "10.1.2.3:6379");
  CHECK(Parsed({"status", "--address", "h:1"}).status.address == "h:1");
  ::unsetenv("LUMEN_ADDRESS");
  CHECK(Parsed({"status"}).status.address.empty());
}

TEST_CASE("lumen logs parses --node, --worker or --actor, and refuses both of the last two") {
  ::unsetenv("LUMEN_ADDRESS");
  auto all = Parsed({"logs"});
  REQUIRE(all.kind == CommandKind::kLogs);
  CHECK(all.logs.node.empty());
  CHECK(all.logs.worker == 0);
  CHECK(all.logs.actor.empty());
  CHECK(all.logs.max_bytes == (1u << 20));
  auto one = Parsed({"logs", "--node", "1a2b", "--worker", "4242", "--tail-bytes", "100",
                     "--address", "h:1", "--token", "t"});
  CHECK(one.logs.node == "1a2b");
  CHECK(one.logs.worker == 4242);
  CHECK(one.logs.max_bytes == 100);
  CHECK(one.logs.head.address == "h:1");
  CHECK(one.logs.head.token == "t");
  CHECK(Parsed({"logs", "--actor", "trainer"}).logs.actor == "trainer");
  CHECK_THAT(UsageError({"logs", "--worker", "1", "--actor", "a"}), Contains("--actor"));
  CHECK_THAT(UsageError({"logs", "--worker", "abc"}), Contains("abc"));
  CHECK_THAT(Help({"logs", "--help"}), Contains("--worker"));
}

TEST_CASE("lumen memory parses --top (default 20) and --address, and refuses a bad --top") {
  lumen::cli::CommandLine line = Parsed({"memory"});
  CHECK(line.kind == CommandKind::kMemory);
  CHECK(line.memory.top == 20);
  line = Parsed({"memory", "--top", "5", "--address", "10.0.0.1:6379", "--token", "t"});
  CHECK(line.memory.top == 5);
  CHECK(line.memory.head.address == "10.0.0.1:6379");
  CHECK(line.memory.head.token == std::optional<std::string>("t"));
  CHECK_THAT(UsageError({"memory", "--top", "many"}), Contains("--top"));
  CHECK_THAT(UsageError({"memory", "--top", "-1"}), Contains("--top"));
  CHECK_THAT(Help({"memory", "--help"}), Contains("--top"));
}
