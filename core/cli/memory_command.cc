#include "core/cli/memory_command.h"

#include <algorithm>
#include <cstdint>
#include <iostream>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/cli/state_commands.h"
#include "lumen/common/format_bytes.h"
#include "lumen/common/head_client.h"
#include "lumen/common/memory_listing.h"

namespace lumen::cli {
namespace {

using runtime::StateRow;

std::string Field(const StateRow& row, const std::string& key) {
  for (const auto& [k, v] : row)
    if (k == key) return v;
  return "";
}

uint64_t Number(const StateRow& row, const std::string& key) {
  uint64_t n = 0;
  (void)absl::SimpleAtoi(Field(row, key), &n);
  return n;
}

std::string Plural(uint64_t n, const char* word) {
  return absl::StrCat(n, " ", word, n == 1 ? "" : "s");
}

}  // namespace

std::string StoreSummaryLine(const runtime::NodeView& n) {
  const auto& s = n.store;
  std::string line = absl::StrFormat(
      "object store: %s / %s used, %s; pinned %s (%s); spilled %s (%s on disk, %s written "
      "in total); restored %s (%s)",
      FormatBytes(n.store_used), FormatBytes(n.store_capacity), Plural(n.store_objects, "object"),
      FormatBytes(s.pinned_bytes), Plural(s.pinned_objects, "object"),
      FormatBytes(s.spilled_bytes), Plural(s.spilled_objects, "object"),
      FormatBytes(s.spilled_total_bytes), FormatBytes(s.restored_bytes),
      Plural(s.restored_objects, "object"));
  if (s.parked_creates > 0) {
    absl::StrAppend(&line, "; ", s.parked_creates, " creates wait for room");
  }
  return line;
}

absl::Status RunMemory(const MemoryOptions& options) {
  if (options.head.token) runtime::SetHeadToken(*options.head.token);
  auto head = runtime::ResolveHeadAddress(options.head.address);
  if (!head.ok()) return head.status();
  auto nodes = runtime::QueryNodes(*head);
  if (!nodes.ok()) return nodes.status();
  const size_t top = static_cast<size_t>(std::max(0, options.top));

  // Each store's largest objects (with the node that holds them), and each
  // owner's view of its largest stored objects, by object id.
  std::vector<StateRow> stored;
  absl::flat_hash_map<std::string, StateRow> owners;
  size_t alive = 0;
  for (const auto& listed : *nodes) {
    if (!listed.alive) continue;
    ++alive;
    // Fresher than the head's copy of the node's last report.
    auto fresh = runtime::QueryNodeStats(listed.address);
    const runtime::NodeView& n = fresh.ok() ? *fresh : listed;
    std::cout << "Node " << listed.id.Hex().substr(0, 12) << "  host " << listed.hostname
              << "  pid " << listed.pid << "\n  " << StoreSummaryLine(n) << "\n";
    auto rows = runtime::QueryNodeState(listed.address, MemoryListing(top));
    if (!rows.ok()) {
      std::cerr << "lumen: node " << listed.id.Hex().substr(0, 12)
                << " did not answer: " << rows.status().message() << "\n";
      continue;
    }
    for (StateRow& row : *rows) {
      if (Field(row, "KIND") == "store") {
        stored.push_back(std::move(row));
      } else if (Field(row, "KIND") == "owner") {
        owners[Field(row, "OBJECT_ID")] = std::move(row);
      }
    }
  }
  if (alive == 0) std::cout << "(no live nodes)\n";

  std::stable_sort(stored.begin(), stored.end(), [](const StateRow& a, const StateRow& b) {
    return Number(a, "SIZE") > Number(b, "SIZE");
  });
  if (stored.size() > top) stored.resize(top);
  std::cout << "\nLargest objects in the stores (" << stored.size() << " shown, --top " << top
            << "):\n";
  std::vector<StateRow> table;
  for (const StateRow& s : stored) {
    auto owner = owners.find(Field(s, "OBJECT_ID"));
    bool known = owner != owners.end();
    std::string refs;
    if (known) {
      refs = absl::StrCat(Field(owner->second, "LOCAL_REFS"), " local, ",
                          Field(owner->second, "BORROWERS"), " borrowers");
      if (Field(owner->second, "IN_FLIGHT") != "0") {
        absl::StrAppend(&refs, ", ", Field(owner->second, "IN_FLIGHT"), " in flight");
      }
    }
    uint64_t pins = Number(s, "PINS");
    std::string state = Field(s, "STATE");
    if (Field(s, "SECONDARY") == "yes") absl::StrAppend(&state, " (copy)");
    table.push_back({{"OBJECT_ID", Field(s, "OBJECT_ID").substr(0, 16)},
                     {"NODE", Field(s, "NODE_DAEMON")},
                     {"SIZE", FormatBytes(Number(s, "SIZE"))},
                     {"STATE", state},
                     {"PINNED", pins > 0 ? absl::StrCat("yes (", pins, ")") : "no"},
                     {"SPILLED", Field(s, "STATE") == "SPILLED" ? "yes"
                                 : Field(s, "ON_DISK") == "yes" ? "on disk too"
                                                                : "no"},
                     {"OWNER", known ? Field(owner->second, "OWNER") : "(job " + Field(s, "JOB") + ")"},
                     {"CALL_SITE", known ? Field(owner->second, "CALL_SITE") : ""},
                     {"REFS", refs}});
  }
  PrintTable(table);
  return absl::OkStatus();
}

}  // namespace lumen::cli
