#include "core/head/head_store.h"

namespace lumen::head {

const char* HeadTableName(HeadTable table) {
  switch (table) {
    case HeadTable::kNodes:
      return "nodes";
    case HeadTable::kDeadNodes:
      return "dead_nodes";
    case HeadTable::kEndedJobs:
      return "ended_jobs";
    case HeadTable::kNamedActors:
      return "named_actors";
    case HeadTable::kPlacementGroups:
      return "placement_groups";
    case HeadTable::kKv:
      return "kv";
  }
  return "unknown";
}

void ApplyRecord(const HeadRecord& record, HeadState* state) {
  auto& table = (*state)[record.table];
  if (record.deleted) {
    table.erase(record.key);
  } else {
    table[record.key] = record.value;
  }
}

}  // namespace lumen::head
