#include "core/head/kv_store.h"

#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "lumen/common/logging.h"

namespace lumen::head {
namespace {

void OverrideFromEnv(const char* name, uint64_t* limit) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return;
  uint64_t value = 0;
  if (!absl::SimpleAtoi(text, &value) || value == 0) {
    LUMEN_LOG(WARNING) << "ignoring " << name << "='" << text
                       << "': not a positive integer; the limit stays " << *limit;
    return;
  }
  *limit = value;
}

}  // namespace

KvLimits KvLimits::FromEnv(KvLimits base) {
  OverrideFromEnv("LUMEN_KV_MAX_KEY_BYTES", &base.max_key_bytes);
  OverrideFromEnv("LUMEN_KV_MAX_VALUE_BYTES", &base.max_value_bytes);
  OverrideFromEnv("LUMEN_KV_MAX_NAMESPACE_BYTES", &base.max_namespace_bytes);
  OverrideFromEnv("LUMEN_KV_MAX_TOTAL_BYTES", &base.max_total_bytes);
  OverrideFromEnv("LUMEN_KV_MAX_WAITERS_PER_CONNECTION", &base.max_waiters_per_connection);
  OverrideFromEnv("LUMEN_KV_MAX_WAITERS", &base.max_waiters);
  return base;
}

absl::Status KvStore::CheckKey(const std::string& ns, const std::string& key) const {
  if (key.empty()) return absl::InvalidArgumentError("a key-value key must not be empty");
  if (key.size() > limits_.max_key_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("key of ", key.size(), " bytes exceeds the key-value limit of ",
                     limits_.max_key_bytes, " bytes (LUMEN_KV_MAX_KEY_BYTES)"));
  }
  if (ns.size() > limits_.max_key_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("namespace name of ", ns.size(), " bytes exceeds the key-value limit of ",
                     limits_.max_key_bytes, " bytes (LUMEN_KV_MAX_KEY_BYTES)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<KvStore::PutResult> KvStore::Put(const std::string& ns, const std::string& key,
                                                std::string value, bool overwrite) {
  if (auto s = CheckKey(ns, key); !s.ok()) return s;
  if (value.size() > limits_.max_value_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("value of ", value.size(), " bytes exceeds the key-value limit of ",
                     limits_.max_value_bytes, " bytes (LUMEN_KV_MAX_VALUE_BYTES)"));
  }
  PutResult result;
  auto nit = namespaces_.find(ns);
  const std::string* old = nullptr;
  if (nit != namespaces_.end()) {
    auto eit = nit->second.entries.find(key);
    if (eit != nit->second.entries.end()) old = &eit->second;
  }
  if (old != nullptr && !overwrite) return result;  // kept; nobody waits on a present key
  uint64_t old_cost = old ? Cost(key, old->size()) : 0;
  uint64_t new_cost = Cost(key, value.size());
  uint64_t ns_bytes = nit == namespaces_.end() ? 0 : nit->second.bytes;
  uint64_t ns_after = ns_bytes - old_cost + new_cost;
  if (new_cost > old_cost && ns_after > limits_.max_namespace_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "namespace '", ns, "' would hold ", ns_after, " bytes, over the key-value limit of ",
        limits_.max_namespace_bytes, " bytes per namespace (LUMEN_KV_MAX_NAMESPACE_BYTES)"));
  }
  uint64_t total_after = total_bytes_ - old_cost + new_cost;
  if (new_cost > old_cost && total_after > limits_.max_total_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the key-value store would hold ", total_after, " bytes, over its limit of ",
        limits_.max_total_bytes, " bytes in all namespaces (LUMEN_KV_MAX_TOTAL_BYTES)"));
  }
  Namespace& space = namespaces_[ns];
  space.entries[key] = std::move(value);
  space.bytes = ns_after;
  total_bytes_ = total_after;
  result.written = true;
  auto wit = waiters_.find(WaitKey(ns, key));
  if (wit != waiters_.end()) {
    result.woken = std::move(wit->second);
    waiters_.erase(wit);
    for (const Waiter& w : result.woken) {
      parked_.erase({w.conn, w.request});
      if (--waiters_per_conn_[w.conn] == 0) waiters_per_conn_.erase(w.conn);
      --waiter_count_;
    }
  }
  return result;
}

const std::string* KvStore::Get(const std::string& ns, const std::string& key) const {
  auto nit = namespaces_.find(ns);
  if (nit == namespaces_.end()) return nullptr;
  auto eit = nit->second.entries.find(key);
  return eit == nit->second.entries.end() ? nullptr : &eit->second;
}

void KvStore::EraseFromNamespace(absl::flat_hash_map<std::string, Namespace>::iterator nit,
                                 std::map<std::string, std::string>::iterator eit) {
  uint64_t cost = Cost(eit->first, eit->second.size());
  nit->second.bytes -= cost;
  total_bytes_ -= cost;
  nit->second.entries.erase(eit);
}

uint64_t KvStore::Delete(const std::string& ns, const std::string& key) {
  auto nit = namespaces_.find(ns);
  if (nit == namespaces_.end()) return 0;
  auto eit = nit->second.entries.find(key);
  if (eit == nit->second.entries.end()) return 0;
  EraseFromNamespace(nit, eit);
  if (nit->second.entries.empty()) namespaces_.erase(nit);
  return 1;
}

uint64_t KvStore::DeletePrefix(const std::string& ns, const std::string& prefix) {
  auto nit = namespaces_.find(ns);
  if (nit == namespaces_.end()) return 0;
  auto& entries = nit->second.entries;
  uint64_t removed = 0;
  auto eit = entries.lower_bound(prefix);
  while (eit != entries.end() && eit->first.compare(0, prefix.size(), prefix) == 0) {
    auto next = std::next(eit);
    EraseFromNamespace(nit, eit);
    eit = next;
    ++removed;
  }
  if (entries.empty()) namespaces_.erase(nit);
  return removed;
}

std::vector<std::string> KvStore::Keys(const std::string& ns, const std::string& prefix,
                                       size_t max) const {
  std::vector<std::string> keys;
  auto nit = namespaces_.find(ns);
  if (nit == namespaces_.end()) return keys;
  const auto& entries = nit->second.entries;
  for (auto eit = entries.lower_bound(prefix);
       eit != entries.end() && keys.size() < max &&
       eit->first.compare(0, prefix.size(), prefix) == 0;
       ++eit) {
    keys.push_back(eit->first);
  }
  return keys;
}

absl::StatusOr<bool> KvStore::AddWaiter(const std::string& ns, const std::string& key,
                                        Waiter waiter) {
  if (auto s = CheckKey(ns, key); !s.ok()) return s;
  if (Exists(ns, key)) return true;
  size_t& mine = waiters_per_conn_[waiter.conn];
  if (mine >= limits_.max_waiters_per_connection) {
    return absl::ResourceExhaustedError(
        absl::StrCat("this connection already waits on ", mine,
                     " keys, the key-value limit (LUMEN_KV_MAX_WAITERS_PER_CONNECTION)"));
  }
  if (waiter_count_ >= limits_.max_waiters) {
    if (mine == 0) waiters_per_conn_.erase(waiter.conn);
    return absl::ResourceExhaustedError(
        absl::StrCat("the key-value store already holds ", waiter_count_,
                     " waiting requests, its limit (LUMEN_KV_MAX_WAITERS)"));
  }
  std::string wait_key = WaitKey(ns, key);
  auto [pit, inserted] = parked_.try_emplace({waiter.conn, waiter.request}, wait_key);
  if (!inserted) {
    if (mine == 0) waiters_per_conn_.erase(waiter.conn);
    return absl::InvalidArgumentError("a wait with this request id is already parked");
  }
  ++mine;
  ++waiter_count_;
  waiters_[wait_key].push_back(waiter);
  return false;
}

bool KvStore::RemoveWaiter(Waiter waiter) {
  auto pit = parked_.find({waiter.conn, waiter.request});
  if (pit == parked_.end()) return false;
  auto wit = waiters_.find(pit->second);
  if (wit != waiters_.end()) {
    std::erase(wit->second, waiter);
    if (wit->second.empty()) waiters_.erase(wit);
  }
  parked_.erase(pit);
  if (--waiters_per_conn_[waiter.conn] == 0) waiters_per_conn_.erase(waiter.conn);
  --waiter_count_;
  return true;
}

std::vector<KvStore::Waiter> KvStore::DropConnection(uint64_t conn) {
  std::vector<Waiter> dropped;
  for (auto pit = parked_.lower_bound({conn, 0}); pit != parked_.end() && pit->first.first == conn;
       ++pit) {
    dropped.push_back({conn, pit->first.second});
  }
  for (const Waiter& w : dropped) RemoveWaiter(w);
  return dropped;
}

uint64_t KvStore::namespace_bytes(const std::string& ns) const {
  auto nit = namespaces_.find(ns);
  return nit == namespaces_.end() ? 0 : nit->second.bytes;
}

}  // namespace lumen::head
