// ShardedNodeMap: an absl::node_hash_map split into kShards sub-maps by key
// hash, so that growing it never rehashes the whole table at once.
//
// Why (issue 17): a node_hash_map doubles by rehashing every entry, and each
// entry's key lives in its own node: a cache miss per entry. The owner's
// object table at a million queued tasks held its lock 300-800 ms on the insert
// that doubled it, and the driver's io thread, which needs that lock to
// complete tasks, stalled as long. Split in kShards, an insert rehashes at most
// one sub-map (1/kShards of the entries), and the lock is released between
// inserts, so the io thread gets in between the sub-maps' rehashes.
//
// The subset of node_hash_map's interface the object table's users need:
// find/end, try_emplace, operator[], erase (by iterator or key), at, contains, count,
// size/empty and iteration (sub-map by sub-map, no order). Node stability is
// kept: an entry's address stays put while it is in the map. Iterators are
// invalidated as node_hash_map's are (by an insert into, or erase from, their
// sub-map; the entry they point at stays valid as said).
//
// Cost: find/insert/erase O(1) amortised as node_hash_map, plus hashing the
// key twice on insert (once here for the sub-map, once inside it); the worst
// single insert rehashes size()/kShards entries. Not thread-safe (the object
// table's lock guards it).
//
// Unlike node_hash_map, an erase that leaves a sub-map under 1/8 full (and at
// least kShrinkCapacity slots) shrinks it to fit, rehashing the few entries
// left (amortised O(1): the sub-map lost 7/8 of its capacity's worth since it
// grew). A node_hash_map never shrinks: after a burst (200,000 puts, then
// freed) the owner's ~1,000 live entries were spread over 2.3 MB of slots, a
// cache miss per lookup, and `single_client_tasks_async` ran 20 % slower for
// the rest of the process's life. So erase, too, invalidates the iterators of
// its sub-map; an entry's address still stays put.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <type_traits>
#include <utility>

#include "absl/container/node_hash_map.h"
#include "absl/hash/hash.h"

namespace lumen::runtime {

template <class K, class V, size_t kShards = 64>
class ShardedNodeMap {
  static_assert(kShards > 0 && (kShards & (kShards - 1)) == 0, "a power of two");
  using Shard = absl::node_hash_map<K, V>;

  template <bool kConst>
  class Iter {
    using Owner = std::conditional_t<kConst, const ShardedNodeMap, ShardedNodeMap>;
    using Inner = std::conditional_t<kConst, typename Shard::const_iterator, typename Shard::iterator>;

   public:
    using iterator_category = std::forward_iterator_tag;
    using value_type = typename Shard::value_type;
    using difference_type = std::ptrdiff_t;
    using reference = std::conditional_t<kConst, const value_type&, value_type&>;
    using pointer = std::conditional_t<kConst, const value_type*, value_type*>;

    Iter() = default;
    // A non-const iterator converts to a const one.
    template <bool kOther, class = std::enable_if_t<kConst && !kOther>>
    Iter(const Iter<kOther>& other) : owner_(other.owner_), shard_(other.shard_), it_(other.it_) {}

    reference operator*() const { return *it_; }
    pointer operator->() const { return &*it_; }
    Iter& operator++() {
      ++it_;
      SkipEmpty();
      return *this;
    }
    Iter operator++(int) {
      Iter old = *this;
      ++*this;
      return old;
    }
    friend bool operator==(const Iter& a, const Iter& b) {
      return a.shard_ == b.shard_ && (a.shard_ == kShards || a.it_ == b.it_);
    }
    friend bool operator!=(const Iter& a, const Iter& b) { return !(a == b); }

   private:
    friend class ShardedNodeMap;
    template <bool>
    friend class Iter;
    Iter(Owner* owner, size_t shard, Inner it) : owner_(owner), shard_(shard), it_(it) {}
    // Moves past the end of sub-maps to the next entry, or to end().
    void SkipEmpty() {
      while (shard_ < kShards && it_ == owner_->shards_[shard_].end()) {
        if (++shard_ < kShards) it_ = owner_->shards_[shard_].begin();
      }
      if (shard_ == kShards) it_ = Inner();
    }

    Owner* owner_ = nullptr;
    size_t shard_ = kShards;  // kShards: end()
    Inner it_{};
  };

 public:
  using key_type = K;
  using mapped_type = V;
  using value_type = typename Shard::value_type;
  using iterator = Iter<false>;
  using const_iterator = Iter<true>;

  iterator begin() {
    iterator it(this, 0, shards_[0].begin());
    it.SkipEmpty();
    return it;
  }
  iterator end() { return iterator(this, kShards, typename Shard::iterator()); }
  const_iterator begin() const {
    const_iterator it(this, 0, shards_[0].begin());
    it.SkipEmpty();
    return it;
  }
  const_iterator end() const { return const_iterator(this, kShards, typename Shard::const_iterator()); }

  iterator find(const K& key) {
    const size_t s = ShardOf(key);
    auto it = shards_[s].find(key);
    return it == shards_[s].end() ? end() : iterator(this, s, it);
  }
  const_iterator find(const K& key) const {
    const size_t s = ShardOf(key);
    auto it = shards_[s].find(key);
    return it == shards_[s].end() ? end() : const_iterator(this, s, it);
  }

  template <class... Args>
  std::pair<iterator, bool> try_emplace(const K& key, Args&&... args) {
    const size_t s = ShardOf(key);
    auto [it, inserted] = shards_[s].try_emplace(key, std::forward<Args>(args)...);
    if (inserted) ++size_;
    return {iterator(this, s, it), inserted};
  }

  // The entry of `key`, default-constructed when new.
  V& operator[](const K& key) { return try_emplace(key).first->second; }

  // Erases the entry at `pos` (not end()).
  void erase(iterator pos) {
    Shard& shard = shards_[pos.shard_];
    shard.erase(pos.it_);
    --size_;
    MaybeShrink(shard);
  }
  size_t erase(const K& key) {
    Shard& shard = shards_[ShardOf(key)];
    const size_t n = shard.erase(key);
    size_ -= n;
    if (n > 0) MaybeShrink(shard);
    return n;
  }

  // The value of `key`, or nullptr when there is none (no throwing `at`: the
  // runtime does not throw below the API).
  V* find_value(const K& key) {
    Shard& shard = shards_[ShardOf(key)];
    auto it = shard.find(key);
    return it == shard.end() ? nullptr : &it->second;
  }
  const V* find_value(const K& key) const {
    const Shard& shard = shards_[ShardOf(key)];
    auto it = shard.find(key);
    return it == shard.end() ? nullptr : &it->second;
  }
  bool contains(const K& key) const { return shards_[ShardOf(key)].contains(key); }
  size_t count(const K& key) const { return contains(key) ? 1 : 0; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

  // The largest sub-map's size: the most entries one insert may rehash.
  size_t max_shard_size() const {
    size_t most = 0;
    for (const Shard& s : shards_) most = std::max(most, s.size());
    return most;
  }
  static constexpr size_t shards() { return kShards; }
  // The slots of all sub-maps (each a power of two minus one, or 0).
  size_t capacity() const {
    size_t slots = 0;
    for (const Shard& s : shards_) slots += s.capacity();
    return slots;
  }

  // A sub-map with fewer slots is never shrunk (its slots fit a few cache lines).
  static constexpr size_t kShrinkCapacity = 127;

 private:
  static void MaybeShrink(Shard& shard) {
    if (shard.capacity() >= kShrinkCapacity && shard.size() * 8 < shard.capacity()) {
      shard.rehash(0);  // to fit size(): node_hash_map keeps its nodes
    }
  }

  // The sub-map of `key`: bits 40.. of the hash (a sub-map places entries by
  // bits 7.. up to its capacity, so the two choices stay independent below
  // 2^33 entries a sub-map).
  static_assert(kShards <= (size_t{1} << 24));
  static size_t ShardOf(const K& key) {
    const uint64_t h = absl::Hash<K>{}(key);
    return static_cast<size_t>(h >> 40) & (kShards - 1);
  }

  std::array<Shard, kShards> shards_;
  size_t size_ = 0;
};

}  // namespace lumen::runtime
