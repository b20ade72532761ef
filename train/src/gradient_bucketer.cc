#include "lumen/train/gradient_bucketer.h"

#include <algorithm>

namespace lumen::train {

GradientBucketer::GradientBucketer(TrainContext& ctx, BucketOptions options)
    : ctx_(ctx), options_(options) {
  if (options_.accumulation_steps < 1) options_.accumulation_steps = 1;
  if (options_.bucket_bytes == 0) options_.bucket_bytes = ctx_.BucketBytes();
}

GradientBucketer::~GradientBucketer() {
  // Buffers in flight must outlive their operations.
  for (Bucket& b : buckets_) {
    if (b.pending) {
      try {
        b.pending->Wait();
      } catch (const Error&) {
        // The group broke; the trainer replaces it. Nothing to hand back.
      }
    }
  }
}

void GradientBucketer::Launch(Bucket& bucket) {
  ++buckets_sent_;
  bucket.pending = collective::AllReduceAsync(std::span<float>(bucket.data),
                                              collective::ReduceOp::kSum, ctx_.GroupName());
}

void GradientBucketer::Ready(std::span<float> grad) {
  if (!SyncStep()) return;  // accumulating: no communication this step
  if (buckets_.empty() || buckets_.back().pending) buckets_.emplace_back();
  Bucket& b = buckets_.back();
  b.data.insert(b.data.end(), grad.begin(), grad.end());
  b.grads.push_back(grad);
  if (options_.overlap && b.data.size() * sizeof(float) >= options_.bucket_bytes) Launch(b);
}

bool GradientBucketer::Finish() {
  const bool sync = SyncStep();
  ++step_;
  if (!sync) return false;
  auto start = StepTimers::Clock::now();
  const float scale =
      1.f / static_cast<float>(ctx_.GetWorldSize() * options_.accumulation_steps);
  for (Bucket& b : buckets_) {
    if (!b.pending) {
      if (!options_.overlap) {
        // One bucket of bucket_bytes at a time, as DDP without overlap would.
        for (size_t off = 0; off < b.data.size();) {
          size_t n = std::min(b.data.size() - off, std::max<size_t>(1, options_.bucket_bytes / 4));
          ++buckets_sent_;
          collective::AllReduce(std::span<float>(b.data.data() + off, n),
                                collective::ReduceOp::kSum, ctx_.GroupName());
          off += n;
        }
      } else {
        Launch(b);
      }
    }
    if (b.pending) b.pending->Wait();
    size_t off = 0;
    for (std::span<float> g : b.grads) {
      for (size_t i = 0; i < g.size(); ++i) g[i] = b.data[off + i] * scale;
      off += g.size();
    }
  }
  buckets_.clear();
  ctx_.timers().AddAllReduce(StepTimers::Clock::now() - start);
  return true;
}

}  // namespace lumen::train
