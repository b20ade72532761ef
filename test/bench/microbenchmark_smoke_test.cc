// `lumen microbenchmark --quick`, run as a user runs it: it must exit 0 (every
// metric measured, every result it checks correct) and print each metric on
// its own line with a positive value. Timing is not asserted: this machine is
// shared and noisy. The run gets its own TMPDIR, which it must leave empty.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

namespace {

namespace fs = std::filesystem;

// Metrics measured over trials: `name mean +- stddev unit`.
const std::vector<std::string> kTrialMetrics = {
    "single_client_get_calls_Plasma_Store",
    "single_client_put_calls_Plasma_Store",
    "multi_client_put_calls_Plasma_Store",
    "single_client_get_calls_inline",
    "single_client_put_calls_inline",
    "single_client_put_gigabytes",
    "memcpy_gigabytes",
    "multi_client_put_gigabytes",
    "single_client_get_object_containing_10k_refs",
    "single_client_tasks_and_get_batch",
    "single_client_wait_1k_refs",
    "single_client_tasks_sync",
    "single_client_tasks_async",
    "multi_client_tasks_async",
    "placement_group_create/removal",
    "1_1_actor_calls_sync",
    "1_1_actor_calls_async",
    "1_1_actor_calls_concurrent",
    "1_n_actor_calls_async",
    "n_n_actor_calls_async",
    "n_n_actor_calls_with_arg_async",
    "actors_created_per_second",
    "multi_node_tasks_async",
};

// Single measurements: `name value unit`.
const std::vector<std::string> kSingleMetrics = {
    "init_seconds", "multi_driver_tasks_async", "cross_node_object_gigabytes",
    "loopback_tcp_gigabytes", "spill_gigabytes", "restore_gigabytes", "disk_write_gigabytes",
    "disk_read_gigabytes", "disk_write_just_freed_gigabytes", "bytes_per_small_object"};

// lumen-collective-bench's metrics, when it is built next to `lumen`.
const std::vector<std::string> kCollectiveMetrics = {
    "allreduce_gigabytes",          "gloo_raw_allreduce_gigabytes",
    "allreduce_unverified_gigabytes", "reducescatter_gigabytes",
    "allreduce_latency_us",         "allreduce_unverified_latency_us",
    "gloo_raw_allreduce_latency_us", "gloo_raw_allgather_record_latency_us"};

struct Line {
  double value = 0;
  bool has_spread = false;  // printed "+- stddev"
  double stddev = 0;
  std::string unit;
};

struct Run {
  int exit_code = -1;
  std::string out;
  std::map<std::string, Line> metrics;  // by name; a repeated name keeps the last
  std::vector<std::string> notes;       // "# ..." lines
  std::vector<std::string> unparsed;    // anything else on stdout
};

// `env` and `flags`: put before the command and after `--quick` as they are.
Run RunQuickMicrobenchmark(const fs::path& tmpdir, const std::string& env = "",
                           const std::string& flags = "") {
  std::string command = env + " TMPDIR='" + tmpdir.string() + "' '" + LUMEN_CLI_PATH +
                        "' microbenchmark --quick" + flags;
  Run run;
  FILE* pipe = ::popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), pipe)) > 0;) run.out.append(buf, n);
  int status = ::pclose(pipe);
  REQUIRE(WIFEXITED(status));
  run.exit_code = WEXITSTATUS(status);

  static const std::regex kTrial(R"(^(\S+) (\S+) \+- (\S+) (\S+)$)");
  static const std::regex kSingle(R"(^(\S+) (\S+) (\S+)$)");
  std::istringstream lines(run.out);
  for (std::string line; std::getline(lines, line);) {
    std::smatch m;
    if (line.rfind("# ", 0) == 0) {
      run.notes.push_back(line);
    } else if (std::regex_match(line, m, kTrial)) {
      run.metrics[m[1]] = Line{std::strtod(m[2].str().c_str(), nullptr), true,
                               std::strtod(m[3].str().c_str(), nullptr), m[4]};
    } else if (std::regex_match(line, m, kSingle)) {
      run.metrics[m[1]] = Line{std::strtod(m[2].str().c_str(), nullptr), false, 0, m[3]};
    } else {
      run.unparsed.push_back(line);
    }
  }
  return run;
}

// A fresh directory, removed with everything in it when this goes. Its name is
// short: the runtime's Unix socket paths under it must fit in 108 bytes.
class TempDir {
 public:
  TempDir() {
    char pattern[] = "/tmp/lbs-XXXXXX";
    if (::mkdtemp(pattern) != nullptr) path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    if (!path_.empty()) fs::remove_all(path_, ignored);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

}  // namespace

TEST_CASE("lumen microbenchmark --quick prints every metric with a positive value") {
  TempDir scratch;
  REQUIRE(!scratch.path().empty());
  const fs::path& tmpdir = scratch.path();

  Run run = RunQuickMicrobenchmark(tmpdir);
  INFO("output:\n" << run.out);
  CHECK(run.exit_code == 0);
  CHECK(run.unparsed.empty());
  for (const auto& name : kTrialMetrics) {
    INFO(name);
    REQUIRE(run.metrics.count(name) == 1);
    const Line& line = run.metrics[name];
    CHECK(line.has_spread);
    CHECK(line.value > 0);
    CHECK(line.stddev >= 0);
    CHECK(!line.unit.empty());
  }
  for (const auto& name : kSingleMetrics) {
    INFO(name);
    REQUIRE(run.metrics.count(name) == 1);
    CHECK(run.metrics[name].value > 0);
  }
  const fs::path collective = fs::path(LUMEN_CLI_PATH).parent_path() / "lumen-collective-bench";
  if (fs::exists(collective)) {
    for (const auto& name : kCollectiveMetrics) {
      INFO(name);
      REQUIRE(run.metrics.count(name) == 1);
      CHECK(run.metrics[name].value > 0);
    }
  }
  // What Lumen cannot measure yet is said, not left out silently.
  bool async_actor_note = false;
  for (const auto& note : run.notes) {
    async_actor_note |= note.find("1_1_async_actor_calls_sync") != std::string::npos;
  }
  CHECK(async_actor_note);

  // Every cluster the benchmark started was torn down with its session files.
  std::vector<std::string> left;
  for (const auto& entry : fs::directory_iterator(tmpdir)) left.push_back(entry.path().string());
  INFO("left in TMPDIR: " << left.size());
  CHECK(left.empty());
}

// The parts of `note` after `prefix`, as numbers ("0.91 0.95 (median 0.93)"
// gives 0.91, 0.95, 0.93); empty when the note does not start so.
std::vector<double> NumbersAfter(const std::string& note, const std::string& prefix) {
  std::vector<double> numbers;
  if (note.rfind(prefix, 0) != 0) return numbers;
  static const std::regex kNumber(R"([0-9]+\.[0-9]+)");
  std::string rest = note.substr(prefix.size());
  for (std::sregex_iterator it(rest.begin(), rest.end(), kNumber), end; it != end; ++it) {
    numbers.push_back(std::strtod(it->str().c_str(), nullptr));
  }
  return numbers;
}

TEST_CASE("lumen microbenchmark --task-events prints each round's on/off ratio beside the means") {
  TempDir scratch;
  REQUIRE(!scratch.path().empty());
  Run run = RunQuickMicrobenchmark(scratch.path(), "LUMEN_TASK_EVENTS_ROUNDS=2", " --task-events");
  INFO("output:\n" << run.out);
  REQUIRE(run.exit_code == 0);
  CHECK(run.unparsed.empty());
  for (const std::string metric : {"single_client_tasks_async", "1_1_actor_calls_async"}) {
    INFO(metric);
    for (const std::string side : {"_events_on", "_events_off"}) {
      REQUIRE(run.metrics.count(metric + side) == 1);
      CHECK(run.metrics[metric + side].value > 0);
      REQUIRE(run.metrics.count(metric + "_cpu" + side) == 1);
      CHECK(run.metrics[metric + "_cpu" + side].value > 0);
    }
    std::vector<double> means, by_round;
    for (const auto& note : run.notes) {
      if (means.empty()) means = NumbersAfter(note, "# " + metric + ", events on / off: rate ");
      if (by_round.empty()) {
        by_round = NumbersAfter(note, "# " + metric + ", events on / off rate by round: ");
      }
    }
    // "rate R, CPU per call C (...; means of 2 rounds)".
    REQUIRE(means.size() == 2);
    // Two rounds: two ratios, sorted, then their median.
    REQUIRE(by_round.size() == 3);
    CHECK(by_round[0] > 0);
    CHECK(by_round[0] <= by_round[1]);
    CHECK(by_round[2] == Approx((by_round[0] + by_round[1]) / 2).margin(0.0011));
    // The ratio of the means of two rounds lies between the rounds' own ratios
    // (a mediant), when each round's pair is its own (printed to 3 places).
    CHECK(means[0] >= by_round[0] - 0.0011);
    CHECK(means[0] <= by_round[1] + 0.0011);
  }
  std::vector<std::string> left;
  for (const auto& entry : fs::directory_iterator(scratch.path())) {
    left.push_back(entry.path().string());
  }
  CHECK(left.empty());
}
