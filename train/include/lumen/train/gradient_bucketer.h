// Bucketed, asynchronous gradient all-reduce, as PyTorch DDP does it: the
// backward pass hands over each gradient as soon as it is final (last layer
// first); gradients are packed into buckets of about ScalingConfig::bucket_bytes
// and a full bucket's all-reduce starts at once on the group's executor while
// the backward pass goes on. Finish waits for the rest and writes the averages
// back. With accumulation_steps N, only every N-th step communicates (the
// others return from Finish at once, the gradients left to accumulate in the
// caller's buffers), and the averages are divided by N as well.
//
//   lumen::train::GradientBucketer buckets(ctx);
//   for (batch ...) {
//     model.Backward(batch, [&](std::span<float> grad) { buckets.Ready(grad); });
//     if (buckets.Finish()) model.Step(lr), model.ZeroGrad();
//   }
//
// With overlap off, Finish all-reduces the buckets one after the other (for
// measuring what overlap buys). Time spent waiting in Finish counts as
// all-reduce time. Used from the train loop's thread only.
#pragma once

#include <deque>
#include <optional>
#include <span>
#include <vector>

#include "lumen/train/train_context.h"

namespace lumen::train {

struct BucketOptions {
  bool overlap = true;
  int accumulation_steps = 1;
  uint64_t bucket_bytes = 0;  // 0: ScalingConfig::bucket_bytes
};

class GradientBucketer {
 public:
  explicit GradientBucketer(TrainContext& ctx, BucketOptions options = {});
  ~GradientBucketer();
  GradientBucketer(const GradientBucketer&) = delete;
  GradientBucketer& operator=(const GradientBucketer&) = delete;

  // `grad` is final for this step; it must stay valid until Finish returns.
  void Ready(std::span<float> grad);
  // Waits for every bucket; each gradient handed over then holds the average
  // over the ranks (and accumulation steps). Returns whether this step
  // communicated (false on the first N-1 of every N accumulation steps).
  bool Finish();
  // Buckets all-reduced so far (for tests and the benchmark).
  int64_t buckets_sent() const { return buckets_sent_; }

 private:
  struct Bucket {
    std::vector<float> data;
    std::vector<std::span<float>> grads;  // where the averaged values go back
    std::optional<collective::CollectiveFuture> pending;
  };
  bool SyncStep() const { return (step_ + 1) % options_.accumulation_steps == 0; }
  void Launch(Bucket& bucket);

  TrainContext ctx_;
  BucketOptions options_;
  std::deque<Bucket> buckets_;  // the last one is being filled
  int64_t step_ = 0;
  int64_t buckets_sent_ = 0;
};

}  // namespace lumen::train
