#include "lumen/scheduler/gpu_assigner.h"

#include <catch2/catch.hpp>

using lumen::scheduler::GpuAssigner;

TEST_CASE("whole GPUs are exclusive and come back on release") {
  GpuAssigner gpus(2);
  auto a = gpus.Assign(1);
  auto b = gpus.Assign(1);
  REQUIRE(a.has_value());
  REQUIRE(b.has_value());
  REQUIRE(a->size() == 1);
  REQUIRE((*a)[0] != (*b)[0]);
  REQUIRE_FALSE(gpus.Assign(1).has_value());
  gpus.Release(*a, 1);
  auto c = gpus.Assign(1);
  REQUIRE(c.has_value());
  REQUIRE((*c)[0] == (*a)[0]);
  REQUIRE(gpus.Assign(0)->empty());
}

TEST_CASE("fractions share one GPU and pack before taking a free one") {
  GpuAssigner gpus(2);
  auto a = gpus.Assign(0.5);
  auto b = gpus.Assign(0.5);
  REQUIRE((*a)[0] == (*b)[0]);  // packed onto the same GPU
  auto whole = gpus.Assign(1);  // the other GPU is still entirely free
  REQUIRE(whole.has_value());
  REQUIRE((*whole)[0] != (*a)[0]);
  REQUIRE_FALSE(gpus.Assign(0.25).has_value());
  gpus.Release(*a, 0.5);
  REQUIRE(gpus.Assign(0.25).has_value());
  REQUIRE_FALSE(gpus.Assign(1).has_value());  // GPU (*a)[0] is only partly free
}

TEST_CASE("several whole GPUs at once, and invalid amounts") {
  GpuAssigner gpus(4);
  auto three = gpus.Assign(3);
  REQUIRE(three->size() == 3);
  REQUIRE_FALSE(gpus.Assign(2).has_value());
  REQUIRE(GpuAssigner::Validate(1.5).code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(GpuAssigner::Validate(-1).code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(GpuAssigner::Validate(0.5).ok());
  REQUIRE(GpuAssigner::Validate(2).ok());
}
