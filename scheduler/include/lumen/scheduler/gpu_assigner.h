// Which GPUs of a node each lease holds, by device index.
//
//   lumen::scheduler::GpuAssigner gpus(2);
//   auto ids = gpus.Assign(1);      // {0}: a whole GPU, held alone
//   auto half = gpus.Assign(0.5);   // {1}: half of GPU 1, shareable with another half
//   gpus.Release(*ids, 1);
//
// Whole amounts take that many entirely free GPUs; a fraction below one takes
// room on one GPU (the fullest that still fits, so fractions pack together and
// whole GPUs stay free). Amounts above one must be whole. Not thread-safe; owned
// by the node daemon's event loop.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/status.h"

namespace lumen::scheduler {

class GpuAssigner {
 public:
  explicit GpuAssigner(int count);

  // InvalidArgument for amounts above one that are not whole, or negative.
  static absl::Status Validate(double quantity);
  // The device ids granted, or nullopt when they are not free right now.
  std::optional<std::vector<int>> Assign(double quantity);
  void Release(const std::vector<int>& ids, double quantity);
  int count() const { return static_cast<int>(free_units_.size()); }

 private:
  static constexpr int64_t kUnits = 10000;  // per GPU, as ResourceSet's 1e-4
  std::vector<int64_t> free_units_;
};

}  // namespace lumen::scheduler
