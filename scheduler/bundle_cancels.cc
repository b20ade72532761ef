#include "lumen/scheduler/bundle_cancels.h"

#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "lumen/common/logging.h"

namespace lumen::scheduler {

absl::StatusCode BundleCancels::TrySend(Kept& kept) {
  absl::Status sent = transport_->Send(kept.request);
  if (sent.ok()) kept.sent = true;
  return sent.code();
}

void BundleCancels::Send(BundleRequest request) {
  const std::string node = request.node_id;
  const uint64_t ticket = request.ticket;
  Kept& kept = by_node_[node][ticket];
  kept.request = std::move(request);
  node_of_[ticket] = node;
  absl::StatusCode sent = TrySend(kept);
  // Unavailable: kept for when the node registers again. Any other error:
  // the node is unknown or dead, nothing left to release there.
  if (sent != absl::StatusCode::kOk && sent != absl::StatusCode::kUnavailable) OnReply(ticket);
}

bool BundleCancels::OnReply(uint64_t ticket) {
  auto it = node_of_.find(ticket);
  if (it == node_of_.end()) return false;
  auto node = by_node_.find(it->second);
  if (node != by_node_.end()) {
    node->second.erase(ticket);
    if (node->second.empty()) by_node_.erase(node);
  }
  node_of_.erase(it);
  return true;
}

void BundleCancels::OnNodeReconnected(const std::string& node_id) {
  auto node = by_node_.find(node_id);
  if (node == by_node_.end()) return;
  std::vector<uint64_t> gone;
  for (auto& [ticket, kept] : node->second) {
    const bool again = kept.sent;
    absl::StatusCode sent = TrySend(kept);
    if (sent == absl::StatusCode::kUnavailable) break;  // gone again: the rest wait too
    if (sent != absl::StatusCode::kOk) {
      gone.push_back(ticket);
      continue;
    }
    if (again) ++resent_;
    LUMEN_LOG(INFO) << "placement group " << absl::BytesToHexString(kept.request.group_id.substr(0, 6))
                    << ": node " << absl::BytesToHexString(node_id.substr(0, 6)) << " is back; "
                    << (again ? "resending" : "sending") << " the cancel of its "
                    << kept.request.bundles.size() << " bundle(s)";
  }
  for (uint64_t ticket : gone) OnReply(ticket);
}

void BundleCancels::OnNodeDead(const std::string& node_id) {
  auto node = by_node_.find(node_id);
  if (node == by_node_.end()) return;
  for (const auto& [ticket, kept] : node->second) node_of_.erase(ticket);
  by_node_.erase(node);
}

size_t BundleCancels::unsent() const {
  size_t n = 0;
  for (const auto& [node, cancels] : by_node_) {
    for (const auto& [ticket, kept] : cancels) n += kept.sent ? 0 : 1;
  }
  return n;
}

size_t BundleCancels::kept() const { return node_of_.size(); }

}  // namespace lumen::scheduler
