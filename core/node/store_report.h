// What a node tells about its object store beyond used/capacity/objects: the
// pins and spilling summary in its NodeStats (for `lumen status` and `lumen
// memory`), and the store's rows of `lumen memory` (its largest objects).
//
//   FillStoreSummary(*store, stats.initStoreSummary());
//   auto rows = StoreMemoryRows(*store, "memory 20");   // empty for other listings
//
// Stateless functions; call them on the node daemon's io thread (the store's).
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "lumen/objectstore/store_server.h"
#include "lumen/proto/lumen.capnp.h"

namespace lumen::node {

// Pinned bytes and objects, what is on disk, what was spilled and restored.
// O(1): each is a running count kept by the store (ObjectTable, SpillIndex,
// SpillStats), so a report costs the same with a million objects.
void FillStoreSummary(const objectstore::StoreServer& store, proto::StoreSummary::Builder out);

// For "memory N": one row per object among the store's N largest (KIND=store,
// OBJECT_ID in full hex, SIZE in bytes, STATE, PINS, ON_DISK, SECONDARY, JOB),
// largest first; for any other `what`, none.
std::vector<std::vector<std::pair<std::string, std::string>>> StoreMemoryRows(
    const objectstore::StoreServer& store, const std::string& what);

}  // namespace lumen::node
