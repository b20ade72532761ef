// KvRendezvousStore: Gloo's rendezvous::Store on the head's key-value store
// (lumen::kv), so members of a collective group find each other with no extra
// service or shared file system.
//
//   KvRendezvousStore store("grads/5f3a.../", std::chrono::seconds(30));
//   auto context = std::make_shared<gloo::rendezvous::Context>(rank, size);
//   context->connectFullMesh(store, device);   // sets and waits on keys under the prefix
//   store.RemoveAll();                          // DestroyGroup: the keys go
//
// Keys live in namespace kCollectiveNamespace under `prefix`. Thread-safe (each
// call is one independent request to the head).
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include <gloo/rendezvous/store.h>

namespace lumen::collective::internal {

inline constexpr char kCollectiveNamespace[] = "lumen.collective";

class KvRendezvousStore : public gloo::rendezvous::Store {
 public:
  KvRendezvousStore(std::string prefix, std::chrono::milliseconds timeout)
      : prefix_(std::move(prefix)), timeout_(timeout) {}

  // Overwrites. Throws lumen::KvError (e.g. a value over the store's limit).
  void set(const std::string& key, const std::vector<char>& data) override;
  // Waits up to the timeout for `key`, then returns it; throws
  // lumen::CollectiveError naming the key when it never came.
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override;

  // Removes every key under the prefix (any member's); returns how many.
  uint64_t RemoveAll();
  const std::string& prefix() const { return prefix_; }

 private:
  std::string prefix_;
  std::chrono::milliseconds timeout_;
};

}  // namespace lumen::collective::internal
