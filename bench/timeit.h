// Ray's `timeit` (python/ray/_private/ray_microbenchmark_helpers.py) for the
// microbenchmark: a warm-up, then several timed trials of a call, each trial's
// rate counted separately so that the spread between trials shows.
//
//   TrialPlan plan;                                   // Ray's: 1 s + 4 x 2 s
//   Measurement m = TimeIt(plan, 1000, [] { SubmitAndGet1000(); });
//   // m.mean, m.stddev: units per second (1,000 units per call here)
//
// Pure timing: runs `call` on the calling thread and nothing else.
#pragma once

#include <functional>

namespace lumen::bench {

// How long one metric is measured.
struct TrialPlan {
  double warmup_seconds = 1.0;  // calls before the timed trials, results dropped
  int trials = 4;               // timed trials, each one rate
  double trial_seconds = 2.0;   // each trial runs at least this long (>= 1 call)
};

// Ray's plan (1 s warm-up, 4 trials of 2 s), or `--quick`'s shorter one.
TrialPlan PlanFor(bool quick);

// Ray's batch size `ray_batch`, or in `--quick` mode a tenth of the batches
// above 1,000 (batches of 1,000 and fewer stay as Ray's).
int Batch(int ray_batch, bool quick);

// The mean and the population standard deviation (numpy.std, as Ray prints)
// of the trials' rates, in units per second.
struct Measurement {
  double mean = 0;
  double stddev = 0;
};

// Runs `call` for plan.warmup_seconds (at least once), then plan.trials
// trials: each runs `call` in steps of (warm-up calls / 10 + 1) until
// plan.trial_seconds have passed, and its rate is `units_per_call` x calls /
// elapsed seconds. Exceptions from `call` propagate.
Measurement TimeIt(const TrialPlan& plan, double units_per_call, const std::function<void()>& call);

}  // namespace lumen::bench
