#include "core/node/store_report.h"

#include "absl/strings/str_cat.h"
#include "lumen/common/memory_listing.h"

namespace lumen::node {

void FillStoreSummary(const objectstore::StoreServer& store, proto::StoreSummary::Builder out) {
  objectstore::ObjectTable::Stats stats = store.GetStats();
  objectstore::SpillStats spill = store.GetSpillStats();
  out.setPinnedBytes(store.PinnedBytes());
  out.setPinnedObjects(stats.num_pinned);
  out.setSpilledBytes(spill.on_disk_bytes);
  out.setSpilledObjects(spill.on_disk_objects);
  out.setRestoredBytes(spill.restored_bytes);
  out.setRestoredObjects(spill.restored_objects);
  out.setSpilledTotalBytes(spill.spilled_bytes);
  out.setParkedCreates(static_cast<uint32_t>(spill.parked_creates));
  out.setRepeatedRequests(store.RepeatedRequests());
}

std::vector<std::vector<std::pair<std::string, std::string>>> StoreMemoryRows(
    const objectstore::StoreServer& store, const std::string& what) {
  std::vector<std::vector<std::pair<std::string, std::string>>> rows;
  std::optional<size_t> top = ParseMemoryListing(what);
  if (!top) return rows;
  for (const objectstore::StoreObjectInfo& o : store.LargestObjects(*top)) {
    rows.push_back({{"KIND", "store"},
                    {"OBJECT_ID", o.id.Hex()},
                    {"SIZE", absl::StrCat(o.size)},
                    {"STATE", o.state},
                    {"PINS", absl::StrCat(o.pins)},
                    {"ON_DISK", o.on_disk ? "yes" : "no"},
                    {"SECONDARY", o.secondary ? "yes" : "no"},
                    {"JOB", o.job.IsNil() ? "" : o.job.Hex().substr(0, 8)}});
  }
  return rows;
}

}  // namespace lumen::node
