#include "bench/timeit.h"

#include <chrono>
#include <cmath>
#include <vector>

namespace lumen::bench {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

}  // namespace

TrialPlan PlanFor(bool quick) {
  if (!quick) return TrialPlan{};
  return TrialPlan{.warmup_seconds = 0.05, .trials = 3, .trial_seconds = 0.2};
}

int Batch(int ray_batch, bool quick) { return quick && ray_batch > 1000 ? ray_batch / 10 : ray_batch; }

Measurement TimeIt(const TrialPlan& plan, double units_per_call, const std::function<void()>& call) {
  long warmup_calls = 0;
  auto warmup_start = Clock::now();
  do {
    call();
    ++warmup_calls;
  } while (SecondsSince(warmup_start) < plan.warmup_seconds);
  // As Ray: the clock is read every `step` calls, not after each one.
  const long step = warmup_calls / 10 + 1;
  std::vector<double> rates;
  for (int trial = 0; trial < plan.trials; ++trial) {
    auto start = Clock::now();
    long calls = 0;
    double elapsed = 0;
    do {
      for (long i = 0; i < step; ++i) call();
      calls += step;
      elapsed = SecondsSince(start);
    } while (elapsed < plan.trial_seconds);
    rates.push_back(units_per_call * static_cast<double>(calls) / elapsed);
  }
  Measurement m;
  if (rates.empty()) return m;
  for (double r : rates) m.mean += r;
  m.mean /= static_cast<double>(rates.size());
  double squares = 0;
  for (double r : rates) squares += (r - m.mean) * (r - m.mean);
  m.stddev = std::sqrt(squares / static_cast<double>(rates.size()));
  return m;
}

}  // namespace lumen::bench
