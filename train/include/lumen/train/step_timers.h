// Where a worker's time goes between two reports: all-reduce, data wait,
// checkpoint write and the trainer's own work are measured where they happen
// (TrainContext::AllReduce and GradientBucketer, the batch iterator,
// NewCheckpointDir..Report, Report's bookkeeping); compute is the rest of the
// wall time. Samples are counted as batches are handed to the loop.
// Thread-safe: the prefetch thread and the loop's thread add to it at once.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace lumen::train {

class StepTimers {
 public:
  using Clock = std::chrono::steady_clock;

  void AddAllReduce(Clock::duration d) { allreduce_ns_ += Nanos(d); }
  void AddDataWait(Clock::duration d) { data_wait_ns_ += Nanos(d); }
  void AddCheckpoint(Clock::duration d) { checkpoint_ns_ += Nanos(d); }
  void AddFramework(Clock::duration d) { framework_ns_ += Nanos(d); }
  void AddSamples(int64_t n) { samples_ += n; steps_ += 1; }

  // The totals since the last Take (seconds, samples, steps), and a new interval.
  struct Interval {
    double wall_s = 0, allreduce_s = 0, data_wait_s = 0, checkpoint_s = 0, framework_s = 0;
    int64_t samples = 0, steps = 0;
    double compute_s() const {
      double c = wall_s - allreduce_s - data_wait_s - checkpoint_s - framework_s;
      return c > 0 ? c : 0;
    }
  };
  Interval Take() {
    Clock::time_point now = Clock::now();
    Interval i;
    i.wall_s = std::chrono::duration<double>(now - interval_start_).count();
    i.allreduce_s = allreduce_ns_.exchange(0) * 1e-9;
    i.data_wait_s = data_wait_ns_.exchange(0) * 1e-9;
    i.checkpoint_s = checkpoint_ns_.exchange(0) * 1e-9;
    i.framework_s = framework_ns_.exchange(0) * 1e-9;
    i.samples = samples_.exchange(0);
    i.steps = steps_.exchange(0);
    interval_start_ = now;
    return i;
  }

 private:
  static int64_t Nanos(Clock::duration d) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(d).count();
  }
  std::atomic<int64_t> allreduce_ns_{0}, data_wait_ns_{0}, checkpoint_ns_{0}, framework_ns_{0};
  std::atomic<int64_t> samples_{0}, steps_{0};
  Clock::time_point interval_start_ = Clock::now();  // the loop's thread only (Take)
};

}  // namespace lumen::train
