#include "kv_rendezvous_store.h"

#include "lumen/lumen.h"

namespace lumen::collective::internal {

void KvRendezvousStore::set(const std::string& key, const std::vector<char>& data) {
  lumen::kv::Put(prefix_ + key, std::string(data.begin(), data.end()), kCollectiveNamespace);
}

std::vector<char> KvRendezvousStore::get(const std::string& key) {
  wait({key}, timeout_);
  auto value = lumen::kv::Get(prefix_ + key, kCollectiveNamespace);
  if (!value) {
    throw CollectiveError("rendezvous key '" + prefix_ + key + "' vanished (group destroyed?)");
  }
  return std::vector<char>(value->begin(), value->end());
}

void KvRendezvousStore::wait(const std::vector<std::string>& keys,
                             const std::chrono::milliseconds& timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (const auto& key : keys) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (!lumen::kv::Wait(prefix_ + key, std::max(left, std::chrono::milliseconds(0)),
                         kCollectiveNamespace)) {
      throw CollectiveError("rendezvous timed out after " + std::to_string(timeout.count()) +
                            " ms waiting for key '" + prefix_ + key + "'");
    }
  }
}

uint64_t KvRendezvousStore::RemoveAll() {
  return lumen::kv::DeletePrefix(prefix_, kCollectiveNamespace);
}

}  // namespace lumen::collective::internal
