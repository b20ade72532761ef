// Prints the microbenchmark's results, one line per metric, and keeps count of
// the metrics that failed.
//
//   Reporter out(PlanFor(quick));
//   out.Rate("single_client_tasks_sync", "tasks/s", 1, [] { ... });
//   // single_client_tasks_sync 5222 +- 120 tasks/s
//   out.Value("init_seconds", 0.05, "s");         // one measurement: no spread
//   out.Note("1_1_async_actor_*: not measured");  // "# ..." lines carry no metric
//   return out.failures() == 0 ? 0 : 1;
//
// Line format: `name mean +- stddev unit` for a metric timed over trials
// (TimeIt), `name value unit` for a single measurement, `# text` for notes.
// A failed metric prints `name FAILED: why` on stderr and no line on stdout.
//
// LUMEN_BENCH_ONLY=REGEX (ECMAScript, searched in the metric's name) keeps
// only the metrics it matches: Rate, Value and Step of any other name return
// false without running (Setup always runs). For A/B runs of a few metrics
// (doc/benchmark.md, "Restructuring before/after").
// Not thread-safe: used by the benchmark's main thread only.
#pragma once

#include <functional>
#include <optional>
#include <regex>
#include <string>

#include "bench/timeit.h"

namespace lumen::bench {

class Reporter {
 public:
  // Reads LUMEN_BENCH_ONLY; a pattern that does not compile is reported on
  // stderr and counted as a failure (every metric then runs).
  explicit Reporter(TrialPlan plan);

  const TrialPlan& plan() const { return plan_; }

  // Times `call` with TimeIt (each call does `units_per_call` units) and
  // prints the mean and standard deviation of the trials. An exception from
  // `call` (a failed Check, a lumen::Error) fails the metric. Returns whether
  // it was measured.
  bool Rate(const std::string& name, const std::string& unit, double units_per_call,
            const std::function<void()>& call);
  // Runs `measure` once and prints the value it returns; an exception fails
  // the metric.
  bool Value(const std::string& name, const std::string& unit,
             const std::function<double()>& measure);
  // Runs a step that prints no metric itself (setting up actors, a check
  // after timing); an exception counts as the failure of metric `name`.
  bool Step(const std::string& name, const std::function<void()>& step);
  // As Step, but runs whatever LUMEN_BENCH_ONLY says (the cluster's start).
  bool Setup(const std::string& name, const std::function<void()>& step);
  // Whether metric `name` is measured (LUMEN_BENCH_ONLY unset, or it matches).
  bool Wants(const std::string& name) const;
  // A `# text` line: something not measured, and why.
  void Note(const std::string& text);
  // Counts a failure found by the caller, printed like one from a metric.
  void Fail(const std::string& name, const std::string& why);

  int failures() const { return failures_; }

 private:
  TrialPlan plan_;
  std::optional<std::regex> only_;  // LUMEN_BENCH_ONLY
  int failures_ = 0;
};

}  // namespace lumen::bench
