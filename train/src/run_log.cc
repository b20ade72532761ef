#include "run_log.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>

namespace lumen::train::internal {
namespace {

double Get(const Metrics& m, const char* key) {
  auto it = m.find(key);
  return it == m.end() ? 0 : it->second;
}

std::string Percent(double part, double whole) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%.0f%%", whole > 0 ? 100.0 * part / whole : 0.0);
  return buf;
}

}  // namespace

RunLog::RunLog(std::string run_dir, bool verbose, int total_epochs)
    : run_dir_(std::move(run_dir)),
      verbose_(verbose),
      total_epochs_(total_epochs),
      tty_(::isatty(STDOUT_FILENO) != 0) {}

std::string RunLog::Line(const Metrics& m) {
  std::ostringstream out;
  auto epoch = m.find("epoch");
  if (epoch != m.end()) out << "epoch " << static_cast<long long>(epoch->second) << " | ";
  for (const auto& [k, v] : m) {
    if (k == "epoch" || k == kSteps || k == kWorldSize || k.rfind("time_", 0) == 0 || k == kSamplesPerSecond) continue;
    out << k << " " << v << " | ";
  }
  const double total = Get(m, kTimeTotalS);
  char sps[32];
  std::snprintf(sps, sizeof(sps), "%.0f", Get(m, kSamplesPerSecond));
  if (m.contains(kWorldSize)) out << static_cast<int>(Get(m, kWorldSize)) << " workers | ";
  out << sps << " samples/s | compute " << Percent(Get(m, kTimeComputeS), total) << " allreduce "
      << Percent(Get(m, kTimeAllReduceS), total) << " data "
      << Percent(Get(m, kTimeDataWaitS), total) << " ckpt "
      << Percent(Get(m, kTimeCheckpointS), total) << " trainer "
      << Percent(Get(m, kTimeFrameworkS), total);
  return out.str();
}

void RunLog::Add(const Metrics& metrics) {
  history_.push_back(metrics);
  WriteCsv();
  if (!verbose_) return;
  if (tty_) std::cout << "\r\033[K";  // over the progress bar
  std::cout << Line(metrics) << "\n";
  if (tty_ && total_epochs_ > 0) {
    const double done = std::min(1.0, (Get(metrics, "epoch") + 1) / total_epochs_);
    const int width = 30, filled = static_cast<int>(done * width);
    std::cout << "[" << std::string(filled, '#') << std::string(width - filled, '.') << "] "
              << static_cast<int>(done * 100) << "%" << std::flush;
    if (done >= 1.0) std::cout << "\n";
  }
  std::cout.flush();
}

void RunLog::WriteCsv() const {
  std::set<std::string> columns;
  for (const Metrics& m : history_) {
    for (const auto& [k, v] : m) columns.insert(k);
  }
  const std::filesystem::path path = std::filesystem::path(run_dir_) / "metrics.csv";
  const std::filesystem::path temp = path.string() + ".tmp";
  {
    std::ofstream out(temp);
    out << "report";
    for (const auto& c : columns) out << "," << c;
    out << "\n";
    for (size_t i = 0; i < history_.size(); ++i) {
      out << i;
      for (const auto& c : columns) {
        out << ",";
        auto it = history_[i].find(c);
        if (it != history_[i].end()) out << it->second;
      }
      out << "\n";
    }
  }
  std::error_code ec;
  std::filesystem::rename(temp, path, ec);
}

TimeSummary RunLog::Summary() const {
  TimeSummary s;
  double total = 0, samples = 0;
  for (const Metrics& m : history_) {
    const double t = Get(m, kTimeTotalS);
    total += t;
    samples += Get(m, kSamplesPerSecond) * t;
    s.compute_share += Get(m, kTimeComputeS);
    s.allreduce_share += Get(m, kTimeAllReduceS);
    s.data_wait_share += Get(m, kTimeDataWaitS);
    s.checkpoint_share += Get(m, kTimeCheckpointS);
    s.framework_share += Get(m, kTimeFrameworkS);
  }
  if (total > 0) {
    s.samples_per_second = samples / total;
    s.compute_share /= total;
    s.allreduce_share /= total;
    s.data_wait_share /= total;
    s.checkpoint_share /= total;
    s.framework_share /= total;
  }
  return s;
}

}  // namespace lumen::train::internal
