// The built `lumen` binary: a bad command line exits with code 2 and a message
// on stderr naming the problem, before anything is started; --help exits 0.
#include <sys/wait.h>

#include <cstdio>
#include <string>

#include <catch2/catch.hpp>

using Catch::Matchers::Contains;

namespace {

struct Outcome {
  int exit_code = -1;
  std::string out;  // stdout and stderr, as `2>&1` merges them
};

// Runs `lumen <args>` (args are shell words) and collects its output.
Outcome RunLumen(const std::string& args, bool stderr_only = false) {
  std::string command = std::string("'") + LUMEN_CLI_PATH + "' " + args +
                        (stderr_only ? " 2>&1 >/dev/null" : " 2>&1");
  Outcome outcome;
  FILE* pipe = ::popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), pipe)) > 0;) outcome.out.append(buf, n);
  int status = ::pclose(pipe);
  REQUIRE(WIFEXITED(status));
  outcome.exit_code = WEXITSTATUS(status);
  return outcome;
}

}  // namespace

TEST_CASE("lumen exits 2 naming an unknown flag or a bad value on stderr") {
  auto bogus = RunLumen("start --head --bogus-flag 3", /*stderr_only=*/true);
  CHECK(bogus.exit_code == 2);
  CHECK_THAT(bogus.out, Contains("--bogus-flag"));
  auto cpus = RunLumen("start --head --num-cpus abc", true);
  CHECK(cpus.exit_code == 2);
  CHECK_THAT(cpus.out, Contains("--num-cpus"));
  auto json = RunLumen("start --head --resources '{bad json'", true);
  CHECK(json.exit_code == 2);
  CHECK_THAT(json.out, Contains("--resources"));
  auto command = RunLumen("frobnicate", true);
  CHECK(command.exit_code == 2);
  CHECK_THAT(command.out, Contains("frobnicate"));
}

TEST_CASE("lumen start --help exits 0 listing its flags on stdout") {
  auto help = RunLumen("start --help 2>/dev/null");
  CHECK(help.exit_code == 0);
  CHECK_THAT(help.out, Contains("--num-cpus"));
  CHECK_THAT(help.out, Contains("--resources"));
}
