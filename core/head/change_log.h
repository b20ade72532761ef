// ChangeLog<T>: the last `capacity` changes of one kind, numbered in order, so
// each reader can be sent only what it has not seen yet (the cluster view sends
// each node the jobs ended and the groups removed since its last view).
//
//   ChangeLog<JobId> ended(1000);
//   ended.Append(job);                                    // seq 1, 2, ...
//   ended.ForEachSince(node.jobs_seen, [&](const JobId& j) { ... });
//   node.jobs_seen = ended.last_seq();
//
// A reader that fell more than `capacity` changes behind gets what is left
// (the oldest are forgotten). Value type; not thread-safe (owned by one loop).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <utility>

namespace lumen::head {

template <class T>
class ChangeLog {
 public:
  explicit ChangeLog(size_t capacity) : capacity_(capacity) {}

  // Records a change; returns its sequence number (1, 2, ...).
  uint64_t Append(T value) {
    entries_.emplace_back(++last_seq_, std::move(value));
    while (entries_.size() > capacity_) entries_.pop_front();
    return last_seq_;
  }

  // Calls `f(value)` for each retained change numbered after `seq`, oldest first.
  template <class F>
  void ForEachSince(uint64_t seq, F&& f) const {
    for (const auto& [n, value] : entries_) {
      if (n > seq) f(value);
    }
  }
  // How many retained changes are numbered after `seq`.
  size_t CountSince(uint64_t seq) const {
    size_t count = 0;
    for (const auto& entry : entries_) count += entry.first > seq ? 1 : 0;
    return count;
  }

  // The oldest retained change (the next to be forgotten), or nullptr when empty.
  const T* oldest() const { return entries_.empty() ? nullptr : &entries_.front().second; }
  uint64_t last_seq() const { return last_seq_; }
  size_t capacity() const { return capacity_; }
  size_t size() const { return entries_.size(); }

 private:
  size_t capacity_;
  uint64_t last_seq_ = 0;
  std::deque<std::pair<uint64_t, T>> entries_;
};

}  // namespace lumen::head
