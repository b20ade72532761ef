// The microbenchmark's result checks: every metric verifies what its calls
// returned, so that a fast wrong answer fails instead of scoring.
//
//   Check(*Get(ref) == 1, "small_value returned the wrong value");
//
// Thread-safe (no state); throws on the calling thread.
#pragma once

#include <stdexcept>
#include <string>

namespace lumen::bench {

// A metric's calls returned something other than what they must.
class CheckFailure : public std::runtime_error {
 public:
  explicit CheckFailure(const std::string& what) : std::runtime_error(what) {}
};

// Throws CheckFailure(`what`) unless `condition` holds.
inline void Check(bool condition, const std::string& what) {
  if (!condition) throw CheckFailure(what);
}

}  // namespace lumen::bench
