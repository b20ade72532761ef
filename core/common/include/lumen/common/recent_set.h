// RecentSet: a set that keeps only the last `capacity` keys inserted (FIFO
// eviction), for ids a node must remember for a while but not for ever
// (ended jobs, removed groups, dead nodes, dead actors). Not thread-safe: one
// owner thread.
#pragma once

#include <cstddef>
#include <deque>

#include "absl/container/flat_hash_set.h"

namespace lumen {

template <class Key>
class RecentSet {
 public:
  explicit RecentSet(size_t capacity) : capacity_(capacity) {}
  // Returns true if `key` was not there.
  bool Insert(const Key& key) {
    if (!keys_.insert(key).second) return false;
    order_.push_back(key);
    if (order_.size() > capacity_) {
      keys_.erase(order_.front());
      order_.pop_front();
    }
    return true;
  }
  bool Contains(const Key& key) const { return keys_.contains(key); }
  size_t size() const { return keys_.size(); }

 private:
  size_t capacity_;
  absl::flat_hash_set<Key> keys_;
  std::deque<Key> order_;
};

}  // namespace lumen
