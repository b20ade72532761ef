// BatchStream: a producer thread assembles batches into a bounded queue; the
// loop's thread takes them, and the time it waits counts as data wait.
#include "lumen/train/dataset.h"

namespace lumen::train {

BatchStream::BatchStream(DatasetShard shard, std::vector<int64_t> indices, int64_t batch_size,
                         int prefetch, std::shared_ptr<StepTimers> timers)
    : shard_(std::move(shard)),
      indices_(std::move(indices)),
      batch_size_(batch_size),
      prefetch_(static_cast<size_t>(prefetch)),
      timers_(std::move(timers)) {
  producer_ = std::thread([this] { Produce(); });
}

BatchStream::~BatchStream() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  producer_.join();
}

int64_t BatchStream::num_batches() const {
  return (static_cast<int64_t>(indices_.size()) + batch_size_ - 1) / batch_size_;
}

size_t BatchStream::buffered() {
  absl::MutexLock lock(&mu_);
  return ready_.size();
}

void BatchStream::Produce() {
  try {
    const int64_t fd = shard_.dataset().feature_dim(), ld = shard_.dataset().label_dim();
    for (size_t start = 0; start < indices_.size(); start += batch_size_) {
      Batch b;
      b.size = std::min<int64_t>(batch_size_, indices_.size() - start);
      b.feature_dim = fd;
      b.label_dim = ld;
      b.features.resize(b.size * fd);
      b.labels.resize(b.size * ld);
      for (int64_t r = 0; r < b.size; ++r) {
        shard_.ReadRow(indices_[start + r], &b.features[r * fd], &b.labels[r * ld]);
      }
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](BatchStream* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu_) {
            return s->stop_ || s->ready_.size() < s->prefetch_;
          },
          this));
      if (stop_) return;
      ready_.push_back(std::move(b));
    }
  } catch (...) {
    absl::MutexLock lock(&mu_);
    error_ = std::current_exception();
  }
  absl::MutexLock lock(&mu_);
  produced_all_ = true;
}

bool BatchStream::Next(Batch* out) {
  auto start = StepTimers::Clock::now();
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](BatchStream* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu_) {
        return !s->ready_.empty() || s->produced_all_;
      },
      this));
  if (timers_) timers_->AddDataWait(StepTimers::Clock::now() - start);
  if (ready_.empty()) {
    if (error_) std::rethrow_exception(error_);
    return false;
  }
  *out = std::move(ready_.front());
  ready_.pop_front();
  if (timers_) timers_->AddSamples(out->size);
  return true;
}

void BatchStream::Iterator::Advance() {
  if (stream_ != nullptr && !stream_->Next(&current_)) stream_ = nullptr;
}

}  // namespace lumen::train
