#include "bench/microbenchmark.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "bench/actor_metrics.h"
#include "bench/multi_driver.h"
#include "bench/multi_node_metrics.h"
#include "bench/object_metrics.h"
#include "bench/spill_metrics.h"
#include "bench/reporter.h"
#include "bench/task_events_overhead.h"
#include "bench/task_metrics.h"
#include "lumen/common/process.h"
#include "lumen/common/timeouts.h"
#include "lumen/lumen.h"

namespace lumen::bench {
namespace {

// The collective metrics come from lumen-collective-bench (it needs Gloo and
// lumen::train), run from this binary's directory when it was built there.
void RunCollectiveBench(Reporter& out, bool quick) {
  if (!out.Wants("allreduce_gigabytes")) return;  // LUMEN_BENCH_ONLY leaves it out
  std::string path = SelfExecutablePath();
  path = path.substr(0, path.rfind('/') + 1) + "lumen-collective-bench";
  if (::access(path.c_str(), X_OK) != 0) {
    out.Note("allreduce_gigabytes etc. not measured: " + path + " is not built");
    return;
  }
  std::fflush(stdout);
  int status = std::system(("'" + path + "'" + (quick ? " --quick" : "")).c_str());
  if (status != 0) out.Fail("lumen-collective-bench", "exited with status " + std::to_string(status));
}

}  // namespace

int RunMicrobenchmark(const MicrobenchmarkOptions& options) {
  if (options.client_seconds) return RunDriverClient(*options.client_seconds);
  const bool quick = options.quick;
  const Timeouts timeouts = Timeouts::FromEnv();
  Reporter out(PlanFor(quick));
  const TrialPlan& plan = out.plan();
  char plan_text[160];
  std::snprintf(plan_text, sizeof(plan_text),
                "mean +- standard deviation of %d trials of %g s after a %g s warm-up, as Ray's "
                "timeit",
                plan.trials, plan.trial_seconds, plan.warmup_seconds);
  out.Note(std::string(plan_text) +
           (quick ? " (--quick: shorter trials, smaller objects, batches over 1,000 a tenth of Ray's)"
                  : ""));
  if (options.task_events) {
    RunTaskEventsOverhead(out, quick);
    return out.failures() == 0 ? 0 : 1;
  }
  out.Note("the _gigabytes metrics of puts count as Ray does: 1 GB = 1000 MiB");

  bool initialized = out.Setup("init_seconds", [&] {
    auto start = std::chrono::steady_clock::now();
    Config config;
    config.object_store_memory = 4 * LargePutBytes(quick);
    config.resources[kCustomResource] = kCustomResourceAmount;
    Init(config);
    out.Value("init_seconds", "s", [&] {
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    });
  });
  if (initialized) {
    RunObjectMetrics(out, quick);
    RunSpillMetrics(out, quick);
    RunTaskMetrics(out, quick, timeouts.bench_wait_timeout);
    RunMultiDriverMetric(out, 2, plan.trial_seconds);
    RunActorMetrics(out, quick);
    Shutdown();
  }
  RunMultiNodeMetrics(out, quick, timeouts.bench_wait_timeout);
  RunCollectiveBench(out, quick);
  return out.failures() == 0 ? 0 : 1;
}

}  // namespace lumen::bench
