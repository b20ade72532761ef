#include "core/cli/state_commands.h"

#include <algorithm>
#include <map>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "lumen/common/head_client.h"
#include "lumen/head/demand_words.h"

namespace lumen::cli {
namespace {

using runtime::StateRow;

using head::FormatQuantity;

// The head `options` name, with its token set for the queries that follow.
absl::StatusOr<std::string> ResolveHead(const HeadQueryOptions& options) {
  if (options.token) runtime::SetHeadToken(*options.token);
  return runtime::ResolveHeadAddress(options.address);
}

void PrintNodeLines(const std::vector<runtime::NodeView>& nodes) {
  std::cout << absl::StrFormat("%-14s %-6s %-8s %-20s %s\n", "NODE", "STATE", "PID", "HOST",
                               "ADDRESS");
  for (const auto& n : nodes) {
    std::cout << absl::StrFormat("%-14s %-6s %-8d %-20s %s\n", n.id.Hex().substr(0, 12),
                                 n.alive ? "ALIVE" : "DEAD", n.pid, n.hostname, n.address);
  }
}

void PrintNodes(const std::string& head, const std::vector<runtime::NodeView>& nodes) {
  std::cout << "Cluster at " << head << ": " << nodes.size() << " node"
            << (nodes.size() == 1 ? "" : "s") << "\n";
  for (const auto& n : nodes) {
    std::cout << "\nNode " << n.id.Hex().substr(0, 12) << "  " << (n.alive ? "alive" : "DEAD")
              << "  host " << n.hostname << "  pid " << n.pid << "\n";
    std::cout << "  resources (used / total):\n";
    for (const auto& [name, total] : n.total) {
      double available = n.available.contains(name) ? n.available.at(name) : 0;
      std::cout << absl::StrFormat("    %-22s %s / %s\n", name,
                                   FormatQuantity(name, total - available),
                                   FormatQuantity(name, total));
    }
    std::cout << "  " << StoreSummaryLine(n) << "\n";
    std::cout << absl::StrFormat(
        "  workers: %d (%d idle); leases: %d active; lease requests (tasks) waiting: %d\n",
        n.workers, n.idle_workers, n.active_leases, n.queued_leases);
  }
}

// Demand no node can meet yet, as each node that holds it reports it, in words:
// "3 tasks (Train) need {GPU: 1}; no node has a GPU".
void PrintInfeasible(const std::vector<runtime::NodeView>& nodes) {
  std::vector<std::map<std::string, double>> alive;
  for (const auto& n : nodes) {
    if (n.alive) alive.push_back(n.total);
  }
  bool header = false;
  for (const auto& n : nodes) {
    if (!n.alive) continue;
    for (const auto& d : n.infeasible) {
      if (!header) {
        std::cout << "\nInfeasible demand (waits until a node that fits joins):\n";
        header = true;
      }
      std::cout << "  " << head::DescribeInfeasible(static_cast<int>(d.count), d.name, d.resources, alive) << "\n";
    }
  }
}

// Lease requests waiting for resources that exist but are busy, per node.
void PrintPending(const std::vector<runtime::NodeView>& nodes) {
  bool header = false;
  for (const auto& n : nodes) {
    if (!n.alive || n.pending.empty()) continue;
    if (!header) {
      std::cout << "\nPending demand (waits for busy resources to free up):\n";
      header = true;
    }
    for (const auto& d : n.pending) {
      std::cout << "  "
                << head::DescribePending(static_cast<int>(d.count), d.name, d.resources,
                                         n.id.Hex().substr(0, 12))
                << "\n";
    }
  }
}

void PrintWaitingGroups(const std::vector<runtime::PlacementGroupView>& groups) {
  bool header = false;
  for (const auto& g : groups) {
    if (g.state == "CREATED" || g.state == "REMOVED") continue;
    if (!header) {
      std::cout << "\nPlacement groups waiting:\n";
      header = true;
    }
    std::cout << "  " << g.name << " (" << g.strategy << ", " << g.bundles.size()
              << " bundles): " << g.state << (g.error.empty() ? "" : ": " + g.error) << "\n";
  }
}

std::vector<StateRow> PlacementGroupRows(const std::vector<runtime::PlacementGroupView>& groups) {
  std::vector<StateRow> rows;
  for (const auto& g : groups) {
    std::string bundles, nodes;
    for (size_t i = 0; i < g.bundles.size(); ++i) {
      std::string one;
      for (const auto& [name, qty] : g.bundles[i]) {
        absl::StrAppend(&one, one.empty() ? "" : " ", name, ":", FormatQuantity(name, qty));
      }
      absl::StrAppend(&bundles, i ? " | " : "", one);
      absl::StrAppend(&nodes, i ? "," : "",
                      g.bundle_nodes[i].empty() ? "-" : g.bundle_nodes[i].substr(0, 12));
    }
    rows.push_back({{"GROUP_ID", g.id.substr(0, 16)},
                    {"NAME", g.name},
                    {"STRATEGY", g.strategy},
                    {"STATE", g.state},
                    {"BUNDLES", bundles},
                    {"NODES", nodes},
                    {"WHY_WAITING", g.error}});
  }
  return rows;
}

}  // namespace

void PrintTable(const std::vector<StateRow>& rows) {
  if (rows.empty()) {
    std::cout << "(none)\n";
    return;
  }
  std::vector<std::string> columns;
  for (const auto& row : rows) {
    for (const auto& [key, value] : row) {
      if (std::find(columns.begin(), columns.end(), key) == columns.end()) columns.push_back(key);
    }
  }
  std::vector<size_t> widths(columns.size());
  for (size_t c = 0; c < columns.size(); ++c) widths[c] = columns[c].size();
  auto value_of = [](const StateRow& row, const std::string& key) {
    for (const auto& [k, v] : row)
      if (k == key) return v;
    return std::string();
  };
  for (const auto& row : rows) {
    for (size_t c = 0; c < columns.size(); ++c) {
      widths[c] = std::max(widths[c], value_of(row, columns[c]).size());
    }
  }
  for (size_t c = 0; c < columns.size(); ++c) {
    std::cout << absl::StrFormat("%-*s  ", static_cast<int>(widths[c]), columns[c]);
  }
  std::cout << "\n";
  for (const auto& row : rows) {
    for (size_t c = 0; c < columns.size(); ++c) {
      std::cout << absl::StrFormat("%-*s  ", static_cast<int>(widths[c]), value_of(row, columns[c]));
    }
    std::cout << "\n";
  }
}

absl::Status RunStatus(const HeadQueryOptions& options) {
  auto head = ResolveHead(options);
  if (!head.ok()) return head.status();
  auto nodes = runtime::QueryNodes(*head);
  if (!nodes.ok()) return nodes.status();
  PrintNodes(*head, *nodes);
  PrintPending(*nodes);
  PrintInfeasible(*nodes);
  // Best effort: the nodes above are the status; a head that does not answer
  // this second query only leaves the waiting groups out.
  auto groups = runtime::QueryPlacementGroups(*head);
  if (groups.ok()) PrintWaitingGroups(*groups);
  return absl::OkStatus();
}

absl::Status RunList(const ListOptions& options) {
  auto head = ResolveHead(options.head);
  if (!head.ok()) return head.status();
  if (options.what == "placement-groups") {
    auto groups = runtime::QueryPlacementGroups(*head);
    if (!groups.ok()) return groups.status();
    PrintTable(PlacementGroupRows(*groups));
    return absl::OkStatus();
  }
  auto nodes = runtime::QueryNodes(*head);
  if (!nodes.ok()) return nodes.status();
  if (options.what == "nodes") {
    PrintNodeLines(*nodes);
    return absl::OkStatus();
  }
  // actors, tasks, objects: each live node answers for the owners on it.
  std::vector<StateRow> rows;
  for (const auto& n : *nodes) {
    if (!n.alive) continue;
    auto part = runtime::QueryNodeState(n.address, options.what);
    if (!part.ok()) {
      std::cerr << "lumen: node " << n.id.Hex().substr(0, 12)
                << " did not answer: " << part.status().message() << "\n";
      continue;
    }
    rows.insert(rows.end(), part->begin(), part->end());
  }
  PrintTable(rows);
  return absl::OkStatus();
}

}  // namespace lumen::cli
