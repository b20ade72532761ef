#include "core/head/node_bundle_transport.h"

#include "core/head/head_replies.h"
#include "lumen/common/control_retry.h"
#include "lumen/common/proto_util.h"

namespace lumen::head {

absl::Status NodeBundleTransport::Send(const scheduler::BundleRequest& request) {
  const NodeTable::Node* node = nodes_->Find(NodeId::FromBinary(request.node_id));
  if (node == nullptr || !node->alive) return absl::NotFoundError("a chosen node is gone");
  Connection* conn = find_connection_(node->conn_id);
  // Alive without a connection: disconnected within its grace (item 8).
  if (conn == nullptr) return absl::UnavailableError("a chosen node is disconnected");
  SendReply(*conn, request.ticket, [&](proto::Envelope::Builder env) {
    const bool prepare = request.phase == scheduler::BundlePhase::kPrepare ||
                         request.phase == scheduler::BundlePhase::kPrepareCommit;
    proto::BundleBatch::Builder batch = prepare ? env.initPrepareBundles()
                                        : request.phase == scheduler::BundlePhase::kCommit
                                            ? env.initCommitBundles()
                                            : env.initCancelBundles();
    batch.setGroupId(BytesOf(request.group_id));
    // One step: the node commits what it prepared before it answers.
    if (request.phase == scheduler::BundlePhase::kPrepareCommit) batch.setCommit(true);
    // The same key when the manager sends it again (BundleCancels): the node
    // answers a repeat from its table (core/node/keyed_requests.h).
    auto key = batch.initRetryKey();
    key.setClient(RetryClientId());
    key.setRequest(request.ticket);
    auto list = batch.initBundles(request.bundles.size());
    for (size_t k = 0; k < request.bundles.size(); ++k) {
      list[k].setIndex(request.bundles[k].index);
      SetResources(list[k].initResources(request.bundles[k].resources.size()),
                   request.bundles[k].resources);
    }
  });
  return absl::OkStatus();
}

}  // namespace lumen::head
