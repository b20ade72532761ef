// RecordPool: records one thread is done with, kept for the next Take, on
// whichever thread, to reuse. Thread-safe. Internal to core/worker.
//
// Why: a record made on one thread and freed on another (a task record made
// by the submitting thread and ended by the io thread; a received task made
// by the io thread and ended by the executor) goes back, with glibc's malloc,
// through the allocating thread's arena under its lock, and that thread's next
// allocation of the size misses its per-thread cache: the driver's main thread
// spent about a third of `single_client_tasks_async` in malloc (stop 35,
// doc/benchmark.md). Kept instead, a record is reset in place by Take, on the
// taking thread, which frees there what the record still holds (its strings'
// and vectors' buffers, made on that side) and then allocates the same sizes
// again from its own cache.
#pragma once

#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace lumen::runtime {

// `Record`: default-constructible; a kept record must hold nothing that has
// to be released at a given time (the caller releases it before Keep).
template <class Record>
class RecordPool {
 public:
  // A record whose buffers hold more than this is not kept (a kept record keeps
  // them until it is taken again).
  static constexpr size_t kMaxHeldBytes = 1024;

  explicit RecordPool(size_t max_kept) : max_kept_(max_kept) {
    absl::MutexLock lock(&mu_);
    kept_.reserve(max_kept);
  }
  RecordPool(const RecordPool&) = delete;
  RecordPool& operator=(const RecordPool&) = delete;

  // A record as new (every field at its default): a kept one, else a new one.
  std::unique_ptr<Record> Take() {
    std::unique_ptr<Record> record;
    {
      absl::MutexLock lock(&mu_);
      if (!kept_.empty()) {
        record = std::move(kept_.back());
        kept_.pop_back();
      }
    }
    if (!record) return std::make_unique<Record>();
    std::destroy_at(record.get());  // here: what it holds is freed on this thread
    std::construct_at(record.get());
    return record;
  }

  // Keeps `record` for Take, or destroys it (after the lock) when the pool is
  // full or its buffers hold `held_bytes` > kMaxHeldBytes.
  void Keep(std::unique_ptr<Record> record, size_t held_bytes) {
    if (!record || held_bytes > kMaxHeldBytes) return;
    absl::MutexLock lock(&mu_);
    if (kept_.size() < max_kept_) kept_.push_back(std::move(record));
  }

  size_t kept() const {
    absl::MutexLock lock(&mu_);
    return kept_.size();
  }

 private:
  const size_t max_kept_;
  mutable absl::Mutex mu_;
  std::vector<std::unique_ptr<Record>> kept_ ABSL_GUARDED_BY(mu_);
};

}  // namespace lumen::runtime
