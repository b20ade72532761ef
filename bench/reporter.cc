#include "bench/reporter.h"

#include <cstdio>
#include <cstdlib>
#include <exception>

namespace lumen::bench {

Reporter::Reporter(TrialPlan plan) : plan_(plan) {
  const char* only = std::getenv("LUMEN_BENCH_ONLY");
  if (only == nullptr || *only == '\0') return;
  try {
    only_.emplace(only, std::regex::ECMAScript);
  } catch (const std::regex_error& e) {
    Fail("LUMEN_BENCH_ONLY", std::string("not a regular expression: ") + e.what());
  }
}

bool Reporter::Wants(const std::string& name) const {
  return !only_ || std::regex_search(name, *only_);
}

bool Reporter::Rate(const std::string& name, const std::string& unit, double units_per_call,
                    const std::function<void()>& call) {
  if (!Wants(name)) return false;
  Measurement m;
  bool ok = Step(name, [&] { m = TimeIt(plan_, units_per_call, call); });
  if (!ok) return false;
  std::printf("%s %.4g +- %.2g %s\n", name.c_str(), m.mean, m.stddev, unit.c_str());
  std::fflush(stdout);
  return true;
}

bool Reporter::Value(const std::string& name, const std::string& unit,
                     const std::function<double()>& measure) {
  if (!Wants(name)) return false;
  double value = 0;
  bool ok = Step(name, [&] { value = measure(); });
  if (!ok) return false;
  std::printf("%s %.4g %s\n", name.c_str(), value, unit.c_str());
  std::fflush(stdout);
  return true;
}

bool Reporter::Step(const std::string& name, const std::function<void()>& step) {
  return Wants(name) && Setup(name, step);
}

bool Reporter::Setup(const std::string& name, const std::function<void()>& step) {
  try {
    step();
    return true;
  } catch (const std::exception& e) {
    Fail(name, e.what());
  }
  return false;
}

void Reporter::Note(const std::string& text) {
  std::printf("# %s\n", text.c_str());
  std::fflush(stdout);
}

void Reporter::Fail(const std::string& name, const std::string& why) {
  ++failures_;
  std::fflush(stdout);
  std::fprintf(stderr, "%s FAILED: %s\n", name.c_str(), why.c_str());
  std::fflush(stderr);
}

}  // namespace lumen::bench
