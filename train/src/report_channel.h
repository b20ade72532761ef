// How rank 0's reports travel to the driver: one key per report in the head's
// key-value store (namespace "lumen.train"), numbered so the driver reads them
// in order and deletes each once taken. Plain functions, any thread.
#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>

#include "lumen/train/result.h"

namespace lumen::train::internal {

inline constexpr const char* kReportNamespace = "lumen.train";

struct ReportRecord {
  int64_t index = 0;
  Metrics metrics;
  std::optional<Checkpoint> checkpoint;
  LUMEN_SERIALIZE(index, metrics, checkpoint);
};

inline std::string ReportPrefix(const std::string& run_id) { return run_id + "/report/"; }
inline std::string ReportKey(const std::string& run_id, int64_t index) {
  char digits[24];
  std::snprintf(digits, sizeof(digits), "%012lld", static_cast<long long>(index));
  return ReportPrefix(run_id) + digits;
}

// "checkpoint_000042"
inline std::string CheckpointDirName(int64_t index) {
  char name[40];
  std::snprintf(name, sizeof(name), "checkpoint_%06lld", static_cast<long long>(index));
  return name;
}

}  // namespace lumen::train::internal
