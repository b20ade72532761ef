// BundleTransport: how the placement-group manager talks to the nodes that
// hold a group's bundles (phase 1 prepare, phase 2 commit, and cancel; or
// prepare and commit in one request when every bundle goes to one node).
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
  kCancel,   // release prepared or committed bundles (acknowledged by a reply)
  // Reserve and make usable at once, all or none: a group whose bundles all go
  // to one node (that node's answer decides alone, so no second phase).
  kPrepareCommit,
};

// "PREPARE", "COMMIT", "CANCEL" or "PREPARE_COMMIT".
const char* BundlePhaseName(BundlePhase phase);

// One bundle of a group, as a node needs it.
struct IndexedBundle {
  int index = 0;                              // its index in the group
  std::map<std::string, double> resources;    // resource name -> quantity
};

// One node's share of one phase of one group.
struct BundleRequest {
  // Echoed by the reply; unique among one manager's requests, and the same
  // when a request is sent again (the node de-duplicates by it: the head
  // makes it the request's retry key).
  uint64_t ticket = 0;
  BundlePhase phase = BundlePhase::kPrepare;
  std::string group_id;
  std::string node_id;
  std::vector<IndexedBundle> bundles;
};

class BundleTransport {
 public:
  virtual ~BundleTransport() = default;

  // Sends `request` to request.node_id. It is answered later by one call to
  // PlacementGroupManager::OnBundleReply(request.ticket, ...) (for a cancel:
  // its acknowledgement), on the manager's thread and never from inside Send,
  // unless the connection it went on dies first. Errors: NotFound when the
  // node is unknown or dead; Unavailable when it is alive but disconnected
  // (it may register again); the manager treats either as a refusal of a
  // prepare or commit, and keeps a cancel for a node that may come back.
  [[nodiscard]] virtual absl::Status Send(const BundleRequest& request) = 0;
};

}  // namespace lumen::scheduler
