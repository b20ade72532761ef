// A small MLP classifier trained data-parallel with DataParallelTrainer:
// synthetic Gaussian blobs, one hidden ReLU layer, softmax cross-entropy,
// hand-written forward and backward passes on the CPU, gradients handed to a
// GradientBucketer layer by layer (last layer first) so their all-reduce
// overlaps the rest of the backward pass. A checkpoint every epoch.
// Used by examples/mlp.cc, bench/train_scaling.cc and the trainer tests;
// include it in one source file per binary (it registers the loop).
//
// Config keys: epochs, global_batch (split evenly over the workers), lr,
// inputs, hidden, classes, overlap (1/0), accumulation_steps, bucket_kib,
// use_gpu (1: the cuBLAS path of mlp_cuda.h when the binary was built with
// CUDA, LUMEN_MLP_WITH_CUDA, and a GPU is visible; otherwise the CPU path).
#pragma once

#include <lumen/lumen.h>
#include <lumen/train/trainer.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <span>
#include <vector>

#ifdef LUMEN_MLP_WITH_CUDA
#include "mlp_cuda.h"
#endif

namespace mlp_example {

// `n` samples of `classes` Gaussian blobs in `inputs` dimensions; the label is
// the class id (one float).
inline void MakeData(int n, int inputs, int classes, std::vector<float>* x,
                     std::vector<float>* y) {
  std::mt19937 rng(11);
  std::normal_distribution<float> noise(0.f, 1.f);
  std::vector<float> centers(classes * inputs);
  for (auto& c : centers) c = 2.f * noise(rng);
  x->resize(static_cast<size_t>(n) * inputs);
  y->resize(n);
  for (int i = 0; i < n; ++i) {
    const int c = i % classes;
    (*y)[i] = static_cast<float>(c);
    for (int k = 0; k < inputs; ++k) (*x)[i * inputs + k] = centers[c * inputs + k] + noise(rng);
  }
}

// The parameters, one flat array: W1 (hidden × inputs), b1, W2 (classes × hidden), b2.
struct Mlp {
  int inputs = 0, hidden = 0, classes = 0;
  std::vector<float> params, grads;

  Mlp(int in, int hid, int cls) : inputs(in), hidden(hid), classes(cls) {
    params.resize(Size());
    grads.assign(Size(), 0.f);
    std::mt19937 rng(3);
    std::normal_distribution<float> n(0.f, 1.f);
    for (size_t i = 0; i < static_cast<size_t>(hidden * inputs); ++i)
      params[i] = n(rng) * std::sqrt(2.f / inputs);
    for (size_t i = 0; i < static_cast<size_t>(classes * hidden); ++i)
      params[W2() + i] = n(rng) * std::sqrt(1.f / hidden);
  }
  size_t Size() const { return B2() + classes; }
  size_t B1() const { return static_cast<size_t>(hidden) * inputs; }
  size_t W2() const { return B1() + hidden; }
  size_t B2() const { return W2() + static_cast<size_t>(classes) * hidden; }

  // Adds this batch's mean gradient to `grads`; calls `ready(span)` for the
  // layer-2 gradients, then the layer-1 ones, as each is final. Returns the
  // summed loss and counts correct predictions.
  template <class Ready>
  double Backward(const lumen::train::Batch& batch, int* correct, Ready&& ready) {
    const int B = static_cast<int>(batch.size);
    std::vector<float> h(static_cast<size_t>(B) * hidden), dl(static_cast<size_t>(B) * classes);
    double loss = 0;
    for (int s = 0; s < B; ++s) {
      const float* x = batch.x(s).data();
      float* hs = &h[static_cast<size_t>(s) * hidden];
      for (int j = 0; j < hidden; ++j) {
        const float* w = &params[static_cast<size_t>(j) * inputs];
        float a = params[B1() + j];
        for (int k = 0; k < inputs; ++k) a += w[k] * x[k];
        hs[j] = a > 0 ? a : 0;
      }
      float* d = &dl[static_cast<size_t>(s) * classes];
      float best = -1e30f, mx = -1e30f;
      int arg = 0;
      for (int c = 0; c < classes; ++c) {
        const float* w = &params[W2() + static_cast<size_t>(c) * hidden];
        float a = params[B2() + c];
        for (int j = 0; j < hidden; ++j) a += w[j] * hs[j];
        d[c] = a;
        if (a > best) best = a, arg = c;
        mx = std::max(mx, a);
      }
      double sum = 0;
      for (int c = 0; c < classes; ++c) sum += std::exp(d[c] - mx);
      const int label = static_cast<int>(batch.y(s)[0]);
      loss += -(d[label] - mx - std::log(sum));
      if (arg == label) ++*correct;
      for (int c = 0; c < classes; ++c) {
        d[c] = static_cast<float>(std::exp(d[c] - mx) / sum) - (c == label ? 1.f : 0.f);
        d[c] /= B;
      }
    }
    // Layer 2: dW2 = dl^T h, db2 = sum dl.
    for (int s = 0; s < B; ++s) {
      const float* d = &dl[static_cast<size_t>(s) * classes];
      const float* hs = &h[static_cast<size_t>(s) * hidden];
      for (int c = 0; c < classes; ++c) {
        float* g = &grads[W2() + static_cast<size_t>(c) * hidden];
        for (int j = 0; j < hidden; ++j) g[j] += d[c] * hs[j];
        grads[B2() + c] += d[c];
      }
    }
    ready(std::span<float>(grads.data() + W2(), Size() - W2()));
    // Layer 1: dh = W2^T dl masked by ReLU; dW1 = dh^T x, db1 = sum dh.
    std::vector<float> dh(hidden);
    for (int s = 0; s < B; ++s) {
      const float* d = &dl[static_cast<size_t>(s) * classes];
      const float* hs = &h[static_cast<size_t>(s) * hidden];
      std::fill(dh.begin(), dh.end(), 0.f);
      for (int c = 0; c < classes; ++c) {
        const float* w = &params[W2() + static_cast<size_t>(c) * hidden];
        for (int j = 0; j < hidden; ++j) dh[j] += w[j] * d[c];
      }
      const float* x = batch.x(s).data();
      for (int j = 0; j < hidden; ++j) {
        if (hs[j] <= 0) continue;
        float* g = &grads[static_cast<size_t>(j) * inputs];
        for (int k = 0; k < inputs; ++k) g[k] += dh[j] * x[k];
        grads[B1() + j] += dh[j];
      }
    }
    // Layer 1 in two halves, so a small bucket size gives several buckets.
    const size_t half = (B1() / 2);
    ready(std::span<float>(grads.data() + half, W2() - half));
    ready(std::span<float>(grads.data(), half));
    return loss;
  }

  void Step(float lr) {
    for (size_t i = 0; i < params.size(); ++i) params[i] -= lr * grads[i];
    std::fill(grads.begin(), grads.end(), 0.f);
  }
};

inline void TrainLoop(lumen::train::TrainContext& ctx) {
  const int inputs = ctx.Config<int>("inputs", 16), hidden = ctx.Config<int>("hidden", 64);
  const int classes = ctx.Config<int>("classes", 4);
  const int epochs = ctx.Config<int>("epochs", 5);
  const int local_batch = std::max(1, ctx.Config<int>("global_batch", 64) / ctx.GetWorldSize());
  const float lr = ctx.Config<float>("lr", 0.1f);
  Mlp model(inputs, hidden, classes);
  int start_epoch = 0;
  if (auto c = ctx.GetCheckpoint()) {
    std::ifstream in(std::filesystem::path(c->path) / "params.bin", std::ios::binary);
    in.read(reinterpret_cast<char*>(&start_epoch), sizeof(start_epoch));
    in.read(reinterpret_cast<char*>(model.params.data()), model.params.size() * sizeof(float));
    ++start_epoch;
  }
  lumen::train::BucketOptions options{
      .overlap = ctx.Config<int>("overlap", 1) != 0,
      .accumulation_steps = ctx.Config<int>("accumulation_steps", 1),
      .bucket_bytes = static_cast<uint64_t>(ctx.Config<double>("bucket_kib", 0) * 1024)};
  lumen::train::GradientBucketer buckets(ctx, options);
  auto ready = [&](std::span<float> g) { buckets.Ready(g); };
#ifdef LUMEN_MLP_WITH_CUDA
  std::unique_ptr<MlpCuda> gpu;
  if (ctx.Config<int>("use_gpu", 0) != 0 && CudaDeviceAvailable())
    gpu = std::make_unique<MlpCuda>(&model);
#else
  struct NoGpu {
    double Backward(const lumen::train::Batch&, int*, decltype(ready)&) { return 0; }
    void Step(float) {}
  };
  std::unique_ptr<NoGpu> gpu;  // never set: this binary has no CUDA path
#endif
  auto shard = ctx.GetDatasetShard("train");
  for (int epoch = start_epoch; epoch < epochs; ++epoch) {
    std::vector<double> totals{0, 0, 0};  // loss, correct, samples
    for (const lumen::train::Batch& batch : shard.Batches(local_batch, epoch)) {
      int correct = 0;
      totals[0] += gpu ? gpu->Backward(batch, &correct, ready)
                       : model.Backward(batch, &correct, ready);
      totals[1] += correct;
      totals[2] += static_cast<double>(batch.size);
      if (buckets.Finish()) {
        if (gpu) gpu->Step(lr);
        else model.Step(lr);
      }
    }
    ctx.AllReduce(totals, lumen::collective::ReduceOp::kSum);
    std::string dir;
    if (ctx.Config<int>("checkpoint", 1) != 0) {
      dir = ctx.NewCheckpointDir();
      std::ofstream out(std::filesystem::path(dir) / "params.bin", std::ios::binary);
      out.write(reinterpret_cast<const char*>(&epoch), sizeof(epoch));
      out.write(reinterpret_cast<const char*>(model.params.data()),
                model.params.size() * sizeof(float));
    }
    ctx.Report({{"epoch", epoch},
                {"loss", totals[0] / totals[2]},
                {"accuracy", totals[1] / totals[2]},
                {"buckets", static_cast<double>(buckets.buckets_sent())}},
               dir);
  }
}

}  // namespace mlp_example

#ifndef MLP_EXAMPLE_NO_LOOP_REGISTRATION  // mlp_cuda.cc needs only the model
LUMEN_TRAIN_LOOP(mlp_example::TrainLoop);
#endif
