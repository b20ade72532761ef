// Where an object lies in a node's store segment: a create's new space, a
// get's pinned object. The value of the store's replies (StoreReply, a
// StatusOr of it) and of a driver's or worker's store requests.
#pragma once

#include <cstdint>

namespace lumen::objectstore {

struct StoreRegion {
  uint64_t offset = 0;
  uint64_t size = 0;
};

}  // namespace lumen::objectstore
