#include "core/worker/submission_queue.h"

#include <algorithm>
#include <iterator>

namespace lumen::runtime {

SubmissionQueue::SubmissionQueue(size_t max_chunk) : max_chunk_(std::max<size_t>(1, max_chunk)) {}

bool SubmissionQueue::Push(std::unique_ptr<PendingTask> task) {
  absl::MutexLock lock(&mu_);
  tasks_.push_back(std::move(task));
  if (drain_due_) return false;
  drain_due_ = true;
  return true;
}

std::vector<std::unique_ptr<PendingTask>> SubmissionQueue::TakeChunk(bool* more) {
  std::vector<std::unique_ptr<PendingTask>> chunk;
  absl::MutexLock lock(&mu_);
  const size_t n = std::min(max_chunk_, tasks_.size());
  chunk.reserve(n);
  std::move(tasks_.begin(), tasks_.begin() + static_cast<std::ptrdiff_t>(n),
            std::back_inserter(chunk));
  tasks_.erase(tasks_.begin(), tasks_.begin() + static_cast<std::ptrdiff_t>(n));
  *more = !tasks_.empty();
  drain_due_ = *more;
  ++chunks_taken_;
  largest_chunk_ = std::max(largest_chunk_, n);
  return chunk;
}

std::vector<std::unique_ptr<PendingTask>> SubmissionQueue::TakeAll() {
  std::vector<std::unique_ptr<PendingTask>> all;
  absl::MutexLock lock(&mu_);
  all.reserve(tasks_.size());
  std::move(tasks_.begin(), tasks_.end(), std::back_inserter(all));
  tasks_.clear();
  drain_due_ = false;
  return all;
}

uint64_t SubmissionQueue::chunks_taken() const {
  absl::MutexLock lock(&mu_);
  return chunks_taken_;
}

size_t SubmissionQueue::largest_chunk() const {
  absl::MutexLock lock(&mu_);
  return largest_chunk_;
}

}  // namespace lumen::runtime
