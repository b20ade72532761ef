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
// Not thread-safe: used by the benchmark's main thread only.
#pragma once

#include <functional>
#include <string>

#include "bench/timeit.h"

namespace lumen::bench {

class Reporter {
 public:
  explicit Reporter(TrialPlan plan) : plan_(plan) {}

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
  // A `# text` line: something not measured, and why.
  void Note(const std::string& text);
  // Counts a failure found by the caller, printed like one from a metric.
  void Fail(const std::string& name, const std::string& why);

  int failures() const { return failures_; }

 private:
  TrialPlan plan_;
  int failures_ = 0;
};

}  // namespace lumen::bench
