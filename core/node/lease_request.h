// A lease request as the node daemon's lease manager and queue hold it,
// decoded from the wire, and the id of the client that sent it.
//
// A plain value (copyable, no thread affinity).
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "lumen/common/ids.h"
#include "lumen/scheduler/resource_set.h"
#include "lumen/scheduler/cluster_view.h"

namespace lumen::node {

// A client of the daemon, by its connection id.
using ClientId = uint64_t;

// One lease request, decoded.
struct LeaseRequest {
  ClientId client = 0;
  uint64_t request_id = 0;
  JobId job;
  scheduler::ResourceSet resources;  // held by the lease
  scheduler::ResourceSet placement;  // must be free to grant it (>= resources)
  std::map<std::string, double> placement_map;  // the same, for messages
  scheduler::SchedulingStrategy strategy;
  std::string group;  // placement group (binary id), or ""
  int bundle_index = -1;
  bool grant_or_reject = false;
  bool actor = false;     // for an actor: its worker is never reused after the lease
  bool detached = false;  // a detached actor: outlives its holder and job
  // Its work may be retried elsewhere (the memory monitor kills such leases'
  // workers first).
  bool retriable = false;
  std::string name;
};

}  // namespace lumen::node
