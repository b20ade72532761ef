// The driver's Get progress bar: what it draws (the terminal check and the
// timing live in api.cc's GetObjects).
#include "core/runtime/progress_bar.h"

#include <catch2/catch.hpp>

namespace lumen::internal {
namespace {

// Invariant: the bar fills in proportion to the ready refs, says how many of
// how many and for how long, and each line overwrites the last one whole.
TEST_CASE("the Get progress bar fills in proportion and overwrites its line") {
  ProgressBar bar(1000);
  std::string half = bar.Render(500, 3.25);
  CHECK(half.rfind("\rGet: [", 0) == 0);
  CHECK(half.find("[###############               ]") != std::string::npos);
  CHECK(half.find("500/1000 objects ready, 3.2 s") != std::string::npos);
  CHECK(bar.Render(0, 1).find("[                              ]") != std::string::npos);
  CHECK(bar.Render(2000, 1).find("[##############################] 1000/1000") != std::string::npos);
  CHECK(half.size() == bar.Render(1, 1).size());
  std::string clear = bar.Clear();
  CHECK(clear.front() == '\r');
  CHECK(clear.back() == '\r');
  CHECK(clear.size() >= half.size());
}

}  // namespace
}  // namespace lumen::internal
