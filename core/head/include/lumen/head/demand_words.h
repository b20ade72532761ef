// Demand in words a newcomer understands, shared by `lumen status` and the
// head's dashboard: "3 tasks (Train) need {GPU: 1}; no node has a GPU".
//
//   std::vector<std::map<std::string, double>> alive = {{{"CPU", 2}}};
//   DescribeInfeasible(3, "Train", {{"GPU", 1}}, alive);
//   // -> "3 tasks (Train) need {GPU: 1}; no node has a GPU"
//
// Pure and thread-safe.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace lumen::head {

// A quantity of resource `name`: bytes ("1.0 GiB") for memory-like names,
// else the number ("2", "0.5").
std::string FormatQuantity(const std::string& name, double value);

// "GPU: 1, memory: 4.0 GiB" (in name order; zero quantities left out).
std::string FormatResources(const std::map<std::string, double>& resources);

// Why no alive node fits `need`, given each alive node's total resources:
// "no node has a GPU", "the most any node has is 2 CPU" (joined by "; "), or
// "no single node has all of it at once" when each resource alone fits.
std::string WhyInfeasible(const std::vector<std::map<std::string, double>>& alive_totals,
                          const std::map<std::string, double>& need);

// "<count> task(s) (<name>) need(s) {<need>}; <why>".
// Pending demand: "2 tasks (Fit) need {CPU: 1}; they wait for busy resources
// or a free worker on node 3f2a..." (`node` as it is to be shown).
std::string DescribePending(int count, const std::string& name,
                            const std::map<std::string, double>& need, const std::string& node);

std::string DescribeInfeasible(int count, const std::string& name,
                               const std::map<std::string, double>& need,
                               const std::vector<std::map<std::string, double>>& alive_totals);

}  // namespace lumen::head
