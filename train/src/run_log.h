// The driver's record of a run's reports: the history, metrics.csv in the run
// directory (rewritten with every report, one column per metric seen), one
// console line per report (epoch, loss, samples/s, time shares) and, when
// stdout is a terminal, a progress bar. Driver thread only.
#pragma once

#include <string>
#include <vector>

#include "lumen/train/result.h"

namespace lumen::train::internal {

class RunLog {
 public:
  // `total_epochs`: for the progress bar (0: none).
  RunLog(std::string run_dir, bool verbose, int total_epochs);
  void Add(const Metrics& metrics);
  const std::vector<Metrics>& history() const { return history_; }
  // Means over the reports so far.
  TimeSummary Summary() const;
  // "epoch 3 | loss 0.0123 | 1234 samples/s | compute 80% allreduce 15% data 3% ckpt 2%"
  static std::string Line(const Metrics& metrics);

 private:
  void WriteCsv() const;
  std::string run_dir_;
  bool verbose_;
  int total_epochs_;
  bool tty_;
  std::vector<Metrics> history_;
};

}  // namespace lumen::train::internal
