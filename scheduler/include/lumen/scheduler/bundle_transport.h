// BundleTransport: how the placement-group manager talks to the nodes that
// hold a group's bundles (phase 1 prepare, phase 2 commit, and cancel).
//
// The head implements it over its node connections; tests implement it with a
// fake that records requests and delivers replies when the test says so:
//
//   class FakeTransport : public BundleTransport {
//     absl::Status Send(const BundleRequest& r) override { sent.push_back(r); return absl::OkStatus(); }
//     std::vector<BundleRequest> sent;
//   };
//   ... manager.OnBundleReply(fake.sent[0].ticket, absl::OkStatus());
//
// No I/O of its own here; an interface only.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace lumen::scheduler {

enum class BundlePhase {
  kPrepare,  // reserve the bundles out of the node's free resources, all or none
  kCommit,   // make prepared bundles usable by leases
  kCancel,   // release prepared or committed bundles (no reply)
};

// "PREPARE", "COMMIT" or "CANCEL".
const char* BundlePhaseName(BundlePhase phase);

// One bundle of a group, as a node needs it.
struct IndexedBundle {
  int index = 0;                              // its index in the group
  std::map<std::string, double> resources;    // resource name -> quantity
};

// One node's share of one phase of one group.
struct BundleRequest {
  uint64_t ticket = 0;  // prepare and commit: echoed by the reply; cancel: 0
  BundlePhase phase = BundlePhase::kPrepare;
  std::string group_id;
  std::string node_id;
  std::vector<IndexedBundle> bundles;
};

class BundleTransport {
 public:
  virtual ~BundleTransport() = default;

  // Sends `request` to request.node_id. A prepare or commit is answered later
  // by one call to PlacementGroupManager::OnBundleReply(request.ticket, ...),
  // on the manager's thread and never from inside Send. Errors: Unavailable
  // when the node cannot be reached (unknown, dead, connection closed); the
  // manager treats that as a refusal. A cancel is fire-and-forget.
  [[nodiscard]] virtual absl::Status Send(const BundleRequest& request) = 0;
};

}  // namespace lumen::scheduler
