#include "lumen/scheduler/gpu_assigner.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace lumen::scheduler {

GpuAssigner::GpuAssigner(int count) : free_units_(count > 0 ? count : 0, kUnits) {}

absl::Status GpuAssigner::Validate(double quantity) {
  if (!(quantity >= 0)) return absl::InvalidArgumentError("a GPU amount must be >= 0");
  if (quantity > 1 && std::fabs(quantity - std::round(quantity)) > 1e-9) {
    return absl::InvalidArgumentError(
        absl::StrCat("GPU amounts above 1 must be whole, got ", quantity));
  }
  return absl::OkStatus();
}

std::optional<std::vector<int>> GpuAssigner::Assign(double quantity) {
  int64_t units = static_cast<int64_t>(std::llround(quantity * kUnits));
  if (units <= 0) return std::vector<int>{};
  std::vector<int> ids;
  if (units >= kUnits) {
    int64_t whole = units / kUnits;
    for (int i = 0; i < count() && static_cast<int64_t>(ids.size()) < whole; ++i) {
      if (free_units_[i] == kUnits) ids.push_back(i);
    }
    if (static_cast<int64_t>(ids.size()) < whole) return std::nullopt;
    for (int i : ids) free_units_[i] = 0;
    return ids;
  }
  int best = -1;
  for (int i = 0; i < count(); ++i) {
    if (free_units_[i] >= units && (best < 0 || free_units_[i] < free_units_[best])) best = i;
  }
  if (best < 0) return std::nullopt;
  free_units_[best] -= units;
  return std::vector<int>{best};
}

void GpuAssigner::Release(const std::vector<int>& ids, double quantity) {
  int64_t units = static_cast<int64_t>(std::llround(quantity * kUnits));
  int64_t each = units >= kUnits ? kUnits : units;
  for (int i : ids) {
    if (i >= 0 && i < count()) free_units_[i] = std::min<int64_t>(kUnits, free_units_[i] + each);
  }
}

}  // namespace lumen::scheduler
