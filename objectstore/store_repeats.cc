// StoreRepeats: the store's answers to keyed requests, for their repeats
// (store_repeats.h).
#include "lumen/objectstore/store_repeats.h"

namespace lumen::objectstore {

const StoreRepeats::Answer* StoreRepeats::Find(const StoreKey& key) {
  if (!key.keyed) return nullptr;
  auto it = clients_.find(key.conn);
  if (it == clients_.end()) return nullptr;
  std::vector<Entry>& entries = it->second.entries;
  const size_t n = entries.size();
  // Newest first: a repeat follows its first closely.
  const size_t newest = n < limits_.per_client ? n : it->second.next + n;
  for (size_t back = 1; back <= n; ++back) {
    const Entry& e = entries[(newest - back) % n];
    if (e.request == key.request && e.client == key.client) {
      ++replayed_;
      return &e.answer;
    }
  }
  return nullptr;
}

void StoreRepeats::Record(const StoreKey& key, const Answer& answer) {
  if (!key.keyed || limits_.per_client == 0) return;
  Ring& ring = clients_[key.conn];
  if (ring.entries.size() < limits_.per_client) {
    ring.entries.push_back(Entry{key.client, key.request, answer});
    return;
  }
  Entry& e = ring.entries[ring.next];
  e.client = key.client;
  e.request = key.request;
  e.answer = answer;
  ring.next = (ring.next + 1) % limits_.per_client;
}

size_t StoreRepeats::size() const {
  size_t n = 0;
  for (const auto& [conn, ring] : clients_) n += ring.entries.size();
  return n;
}

}  // namespace lumen::objectstore
