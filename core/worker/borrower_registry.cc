#include "core/worker/borrower_registry.h"

#include <algorithm>

namespace lumen::runtime {

int BorrowerRegistry::Apply(uint64_t conn, const ObjectId& id, int delta) {
  if (delta == 0) return 0;
  if (delta > 0) {
    by_conn_[conn][id] += delta;
    return delta;
  }
  auto cit = by_conn_.find(conn);
  if (cit == by_conn_.end()) return 0;  // never registered through this connection
  auto& counts = cit->second;
  auto it = counts.find(id);
  if (it == counts.end()) return 0;
  int applied = -std::min(-delta, it->second);
  it->second += applied;
  if (it->second == 0) counts.erase(it);
  if (counts.empty()) by_conn_.erase(cit);
  return applied;
}

std::vector<std::pair<ObjectId, int>> BorrowerRegistry::DropConnection(uint64_t conn) {
  std::vector<std::pair<ObjectId, int>> released;
  auto cit = by_conn_.find(conn);
  if (cit == by_conn_.end()) return released;
  for (const auto& [id, n] : cit->second) released.emplace_back(id, -n);
  by_conn_.erase(cit);
  return released;
}

}  // namespace lumen::runtime
