// KvStore: the head's key-value store, namespaced and bounded, with parked
// waiters (a `Wait` that is answered when its key is put).
//
//   KvStore store(KvLimits::FromEnv(KvLimits{}));
//   ASSIGN_OR_RETURN(KvStore::PutResult put, store.Put("ns", "key", "value", /*overwrite=*/true));
//   for (const KvStore::Waiter& w : put.woken) { /* answer w's request: found */ }
//   const std::string* v = store.Get("ns", "key");        // nullptr: absent
//   ASSIGN_OR_RETURN(bool present, store.AddWaiter("ns", "other", {conn, request}));
//   store.RemoveWaiter({conn, request});                  // its timeout passed
//   std::vector<KvStore::Waiter> dropped = store.DropConnection(conn);  // socket closed
//
// Accounting: an entry costs its key's bytes, its value's bytes and
// `kEntryOverheadBytes` (so a namespace of empty values is bounded too). A
// namespace whose last key is deleted is forgotten. Limits (each also named
// in the error text, with the environment variable that sets it):
//   - a key (and a namespace name) is 1..max_key_bytes bytes;
//   - a value is at most max_value_bytes;
//   - one namespace holds at most max_namespace_bytes;
//   - all namespaces together hold at most max_total_bytes;
//   - one connection parks at most max_waiters_per_connection waiters, and the
//     store at most max_waiters.
//
// It does no I/O: the head's event loop turns requests into these calls and
// answers the waiters the calls return. Not thread-safe (owned by the head's
// event loop, checked by its caller KvService).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lumen/head/kv_limits.h"

namespace lumen::head {

class KvStore {
 public:
  // Bytes an entry costs beyond its key and value (map node, bookkeeping).
  static constexpr uint64_t kEntryOverheadBytes = 64;

  // A parked Wait: the connection it came on and its request id.
  struct Waiter {
    uint64_t conn = 0;
    uint64_t request = 0;
    bool operator==(const Waiter&) const = default;
  };
  struct PutResult {
    bool written = false;         // false: the key existed and overwrite was off
    std::vector<Waiter> woken;    // waiters on this key, now removed: answer them
  };

  explicit KvStore(KvLimits limits) : limits_(limits) {}

  // Stores `value` under (`ns`, `key`). With `overwrite` false an existing key
  // keeps its value (written = false, not an error). Errors: InvalidArgument
  // (empty or over-long key or namespace), ResourceExhausted (value, namespace
  // or store over its limit; nothing changes).
  [[nodiscard]] absl::StatusOr<PutResult> Put(const std::string& ns, const std::string& key,
                                              std::string value, bool overwrite);
  // The value, or nullptr when absent. The pointer lives until the next
  // mutating call.
  const std::string* Get(const std::string& ns, const std::string& key) const;
  bool Exists(const std::string& ns, const std::string& key) const {
    return Get(ns, key) != nullptr;
  }
  // Removes one key; returns how many were removed (0 or 1).
  uint64_t Delete(const std::string& ns, const std::string& key);
  // Removes every key of `ns` that starts with `prefix` ("" removes the whole
  // namespace); returns how many.
  uint64_t DeletePrefix(const std::string& ns, const std::string& prefix);
  // The keys of `ns` that start with `prefix`, in order, at most `max` of them.
  std::vector<std::string> Keys(const std::string& ns, const std::string& prefix,
                                size_t max) const;

  // Parks `waiter` until (`ns`, `key`) is put. Returns true (nothing parked)
  // when the key exists already. Errors: InvalidArgument (bad key),
  // ResourceExhausted (the connection or the store holds its limit of
  // waiters).
  [[nodiscard]] absl::StatusOr<bool> AddWaiter(const std::string& ns, const std::string& key,
                                               Waiter waiter);
  // Forgets a parked waiter (its timeout passed); false if it was not parked.
  bool RemoveWaiter(Waiter waiter);
  // Forgets every waiter of connection `conn` and returns them.
  std::vector<Waiter> DropConnection(uint64_t conn);

  // Validates a key or namespace name (used by requests that store nothing).
  [[nodiscard]] absl::Status CheckKey(const std::string& ns, const std::string& key) const;

  uint64_t namespace_bytes(const std::string& ns) const;
  uint64_t total_bytes() const { return total_bytes_; }
  size_t waiter_count() const { return waiter_count_; }
  const KvLimits& limits() const { return limits_; }

 private:
  struct Namespace {
    std::map<std::string, std::string> entries;  // ordered: prefix scans
    uint64_t bytes = 0;
  };
  static uint64_t Cost(const std::string& key, size_t value_bytes) {
    return key.size() + value_bytes + kEntryOverheadBytes;
  }
  static std::string WaitKey(const std::string& ns, const std::string& key) {
    return ns + '\0' + key;
  }
  void EraseFromNamespace(absl::flat_hash_map<std::string, Namespace>::iterator nit,
                          std::map<std::string, std::string>::iterator eit);

  KvLimits limits_;
  absl::flat_hash_map<std::string, Namespace> namespaces_;
  uint64_t total_bytes_ = 0;
  // (ns '\0' key) -> waiters in arrival order.
  std::map<std::string, std::vector<Waiter>> waiters_;
  // (conn, request) -> the wait key it is parked on; ordered by connection.
  std::map<std::pair<uint64_t, uint64_t>, std::string> parked_;
  absl::flat_hash_map<uint64_t, size_t> waiters_per_conn_;
  size_t waiter_count_ = 0;
};

}  // namespace lumen::head
