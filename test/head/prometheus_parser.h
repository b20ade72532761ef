// A strict parser of the Prometheus text exposition format (0.0.4), for tests
// of GET /metrics: it rejects what Prometheus's own parser rejects (bad names,
// bad escapes, bad numbers, a TYPE after its samples, a family split in two,
// duplicate series) and also checks histograms (cumulative buckets, an +Inf
// bucket equal to _count, a _sum). Test-only.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace lumen::test {

struct PromSample {
  std::string name;  // the series name (e.g. x_bucket for histogram x)
  std::map<std::string, std::string> labels;
  double value = 0;
};

struct PromFamily {
  std::string name;
  std::string type;  // counter, gauge, histogram, summary, untyped
  std::string help;
  std::vector<PromSample> samples;
};

// The families of `text`, in order; InvalidArgument naming the line on any
// violation.
absl::StatusOr<std::vector<PromFamily>> ParsePrometheusText(const std::string& text);

}  // namespace lumen::test
