#include "bench/scale_metrics.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_split.h"

#include "bench/reporter.h"
#include "bench/scale_experiments.h"
#include "bench/scale_table.h"
#include "lumen/common/process.h"
#include "lumen/common/timeouts.h"

namespace lumen::bench {
namespace {

// The machine's load when the benchmark starts: its results depend on it.
std::string LoadNote() {
  std::ifstream in("/proc/loadavg");
  std::string one, five, fifteen;
  in >> one >> five >> fifteen;
  return "load average at start: " + one + " " + five + " " + fifteen + " (" +
         std::to_string(std::thread::hardware_concurrency()) + " CPUs)";
}

}  // namespace

std::string DefaultScaleOutDir() {
  std::string dir = SelfExecutablePath();
  dir = dir.substr(0, dir.rfind('/'));
  if (dir.size() >= 4 && dir.compare(dir.size() - 4, 4, "/bin") == 0) dir.resize(dir.size() - 4);
  return dir.empty() ? "." : dir;
}

int RunScaleBenchmark(const ScaleOptions& options) {
  Reporter out(PlanFor(options.quick));
  ScaleTable table;
  ScaleContext context{out, table, options, Timeouts::FromEnv().bench_wait_timeout};
  out.Note(LoadNote());
  const std::vector<std::string> only = absl::StrSplit(options.only, ',', absl::SkipEmpty());
  auto wanted = [&](const char* name) {
    return only.empty() || std::find(only.begin(), only.end(), name) != only.end();
  };
  if (wanted("drain")) RunDrainScale(context);
  if (wanted("actors")) RunActorScale(context);
  if (wanted("puts")) RunPutScale(context);
  if (wanted("store_puts")) RunStorePutScale(context);
  if (wanted("nodes")) RunManyNodesScale(context);
  const std::string csv = options.out_dir + "/scale.csv";
  const std::string png = options.out_dir + "/scale.png";
  std::string error;
  if (!table.WriteCsv(csv, &error)) {
    out.Fail("scale.csv", error);
  } else {
    out.Note("wrote " + csv);
    std::string why = table.Plot(csv, png);
    if (why.empty()) {
      out.Note("wrote " + png);
    } else {
      out.Note("no plot: " + why);
    }
  }
  return out.failures() == 0 ? 0 : 1;
}

}  // namespace lumen::bench
