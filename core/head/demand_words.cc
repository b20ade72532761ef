#include "lumen/head/demand_words.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "lumen/common/format_bytes.h"

namespace lumen::head {

std::string FormatQuantity(const std::string& name, double value) {
  // A byte count only when it is one: a node reports its resources as doubles,
  // and a negative, NaN or >= 2^64 value has no uint64_t (the cast would be
  // undefined), so it is printed as the number it is.
  if (name.find("memory") != std::string::npos && value >= 0 && value < 0x1p64) {
    return FormatBytes(static_cast<uint64_t>(value));
  }
  return absl::StrFormat("%g", value);
}

std::string FormatResources(const std::map<std::string, double>& resources) {
  std::string out;
  for (const auto& [name, qty] : resources) {
    if (qty == 0) continue;  // {CPU: 1}, not {CPU: 1, GPU: 0}
    absl::StrAppend(&out, out.empty() ? "" : ", ", name, ": ", FormatQuantity(name, qty));
  }
  return out;
}

std::string WhyInfeasible(const std::vector<std::map<std::string, double>>& alive_totals,
                          const std::map<std::string, double>& need) {
  std::vector<std::string> reasons;
  for (const auto& [name, qty] : need) {
    double most = 0;
    for (const auto& total : alive_totals) {
      auto it = total.find(name);
      if (it != total.end()) most = std::max(most, it->second);
    }
    if (most >= qty) continue;
    if (most == 0) {
      reasons.push_back(name == "GPU" ? "no node has a GPU" : "no node has " + name);
    } else {
      reasons.push_back("the most any node has is " + FormatQuantity(name, most) + " " + name);
    }
  }
  if (reasons.empty()) return "no single node has all of it at once";
  std::string out;
  for (const auto& r : reasons) absl::StrAppend(&out, out.empty() ? "" : "; ", r);
  return out;
}

std::string DescribeInfeasible(int count, const std::string& name,
                               const std::map<std::string, double>& need,
                               const std::vector<std::map<std::string, double>>& alive_totals) {
  return absl::StrFormat("%d %s (%s) %s {%s}; %s", count, count == 1 ? "task" : "tasks", name,
                         count == 1 ? "needs" : "need",
                         FormatResources(need), WhyInfeasible(alive_totals, need));
}

std::string DescribePending(int count, const std::string& name,
                            const std::map<std::string, double>& need, const std::string& node) {
  return absl::StrFormat("%d %s (%s) %s {%s}; %s for busy resources or a free worker on node %s",
                         count, count == 1 ? "task" : "tasks", name,
                         count == 1 ? "needs" : "need", FormatResources(need),
                         count == 1 ? "it waits" : "they wait", node);
}

}  // namespace lumen::head
