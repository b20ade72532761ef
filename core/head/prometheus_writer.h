// PrometheusWriter: builds a page in the Prometheus text exposition format
// (version 0.0.4): families with their HELP and TYPE lines, samples with
// escaped label values, histograms with cumulative buckets, _sum and _count.
//
//   PrometheusWriter out;
//   out.Family("lumen_workers", "gauge", "Worker processes by state.");
//   out.Sample("lumen_workers", {{"node", "1a2b"}, {"state", "idle"}}, 3);
//   std::string page = out.Take();
//
// Names must match [a-zA-Z_:][a-zA-Z0-9_:]* (label names without ':'); the
// caller writes all samples of a family right after its Family call. Not
// thread-safe (one per page).
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace lumen::head {

class PrometheusWriter {
 public:
  using Labels = std::vector<std::pair<std::string, std::string>>;

  // The HELP and TYPE lines of family `name`; `type`: counter, gauge or histogram.
  void Family(const std::string& name, const std::string& type, const std::string& help);
  // One sample line.
  void Sample(const std::string& name, const Labels& labels, double value);
  // A histogram's samples: `counts` per bucket (not cumulative) for the upper
  // bounds `bounds`, plus one more for +Inf; `sum` of the observations.
  void Histogram(const std::string& name, const Labels& labels, const std::vector<double>& bounds,
                 const std::vector<uint64_t>& counts, double sum);

  // The page written so far (the writer is empty again).
  std::string Take() { return std::exchange(out_, {}); }

  // A value as the format writes it: "+Inf", "-Inf", "NaN", or the shortest
  // decimal that reads back to it.
  static std::string FormatValue(double value);

 private:
  std::string out_;
};

}  // namespace lumen::head
