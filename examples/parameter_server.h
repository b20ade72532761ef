// The parameter-server example's model, data and training loops, shared by
// examples/parameter_server.cc and test/train/train_test.cc.
//
// A logistic-regression classifier with a hand-written forward and backward
// pass, trained on two Gaussian blobs in 20 dimensions (deterministic: fixed
// seeds). DataWorker actors each hold one shard of the training set and turn
// weights into a minibatch gradient; a lumen::train::ParameterServer actor
// applies the gradients.
//
//   lumen::Init(argc, argv);
//   ps_example::TrainOptions options;  // 4 workers, 50 iterations
//   ps_example::TrainResult sync = ps_example::RunSync(options);
//   ps_example::TrainResult async = ps_example::RunAsync(options);
//   std::cout << sync.accuracy << " " << async.accuracy << "\n";
//
// Including this header registers DataWorker's factory and method
// (LUMEN_REMOTE). RunSync and RunAsync need an initialised runtime; they block
// the calling thread and may run on any thread.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <numbers>
#include <ostream>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "lumen/lumen.h"
#include "lumen/train/parameter_server.h"

namespace ps_example {

// The synthetic data set: class 1 is N(+separation * u, I), class 0 is
// N(-separation * u, I), u a random unit vector; classes alternate, so both
// halves of any split are balanced. The Bayes accuracy is Phi(separation)
// (0.977 for 2.0); a classifier that guesses scores 0.5.
struct DataConfig {
  int num_train = 4000;
  int num_test = 1000;
  int dims = 20;
  float separation = 2.0f;
  uint32_t seed = 2024;
  LUMEN_SERIALIZE(num_train, num_test, dims, separation, seed);
};

// Row-major samples: x[i * dims + j]; labels 0 or 1.
struct Dataset {
  int dims = 0;
  std::vector<float> x;
  std::vector<float> y;
  size_t size() const { return y.size(); }
};

namespace internal {

// Box-Muller on std::mt19937 (whose output the standard pins down), so the data
// are the same with every standard library.
class Gaussian {
 public:
  explicit Gaussian(uint32_t seed) : engine_(seed) {}
  float Next() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    double u1 = (static_cast<double>(engine_()) + 1.0) / 4294967297.0;  // (0, 1)
    double u2 = static_cast<double>(engine_()) / 4294967296.0;          // [0, 1)
    double r = std::sqrt(-2.0 * std::log(u1));
    spare_ = static_cast<float>(r * std::sin(2.0 * std::numbers::pi * u2));
    has_spare_ = true;
    return static_cast<float>(r * std::cos(2.0 * std::numbers::pi * u2));
  }

 private:
  std::mt19937 engine_;
  float spare_ = 0.f;
  bool has_spare_ = false;
};

inline std::vector<float> Direction(const DataConfig& config) {
  Gaussian g(config.seed);
  std::vector<float> u(config.dims);
  double norm = 0.0;
  for (float& v : u) {
    v = g.Next();
    norm += static_cast<double>(v) * v;
  }
  for (float& v : u) v = static_cast<float>(v / std::sqrt(norm));
  return u;
}

inline Dataset Blobs(const DataConfig& config, int count, uint32_t seed) {
  std::vector<float> u = Direction(config);
  Gaussian g(seed);
  Dataset data;
  data.dims = config.dims;
  data.x.resize(static_cast<size_t>(count) * config.dims);
  data.y.resize(count);
  for (int i = 0; i < count; ++i) {
    float label = static_cast<float>(i % 2);
    float sign = label > 0.5f ? 1.f : -1.f;
    for (int j = 0; j < config.dims; ++j) {
      data.x[static_cast<size_t>(i) * config.dims + j] = sign * config.separation * u[j] + g.Next();
    }
    data.y[i] = label;
  }
  return data;
}

inline float Sigmoid(float z) { return 1.f / (1.f + std::exp(-z)); }

// w[0..dims) are the feature weights, w[dims] the bias.
inline float Logit(const std::vector<float>& w, const float* x, int dims) {
  float z = w[dims];
  for (int j = 0; j < dims; ++j) z += w[j] * x[j];
  return z;
}

}  // namespace internal

inline Dataset TrainSet(const DataConfig& config) {
  return internal::Blobs(config, config.num_train, config.seed + 1);
}
inline Dataset TestSet(const DataConfig& config) {
  return internal::Blobs(config, config.num_test, config.seed + 2);
}

// Logistic regression has dims + 1 parameters.
inline size_t NumParameters(const DataConfig& config) { return config.dims + 1; }

// Mean binary cross-entropy and accuracy of `weights` on `data` (a sample
// counts as class 1 when its logit is >= 0). Throws std::invalid_argument if
// `weights` does not have dims + 1 entries.
struct Evaluation {
  double loss = 0.0;
  double accuracy = 0.0;
};
inline Evaluation Evaluate(const std::vector<float>& weights, const Dataset& data) {
  if (weights.size() != static_cast<size_t>(data.dims) + 1) {
    throw std::invalid_argument("Evaluate: expected " + std::to_string(data.dims + 1) +
                                " weights, got " + std::to_string(weights.size()));
  }
  Evaluation e;
  for (size_t i = 0; i < data.size(); ++i) {
    float z = internal::Logit(weights, &data.x[i * data.dims], data.dims);
    // log(1 + e^z) - y z, computed without overflow.
    double softplus = z > 0 ? z + std::log1p(std::exp(-z)) : std::log1p(std::exp(z));
    e.loss += softplus - data.y[i] * z;
    e.accuracy += ((z >= 0.f) == (data.y[i] > 0.5f)) ? 1.0 : 0.0;
  }
  if (data.size() > 0) {
    e.loss /= static_cast<double>(data.size());
    e.accuracy /= static_cast<double>(data.size());
  }
  return e;
}

// The gradient of the mean cross-entropy over samples [begin, end) of `data`.
inline std::vector<float> Gradient(const std::vector<float>& weights, const Dataset& data,
                                   size_t begin, size_t end) {
  const int dims = data.dims;
  std::vector<float> grad(dims + 1, 0.f);
  for (size_t i = begin; i < end; ++i) {
    const float* x = &data.x[i * dims];
    float err = internal::Sigmoid(internal::Logit(weights, x, dims)) - data.y[i];
    for (int j = 0; j < dims; ++j) grad[j] += err * x[j];
    grad[dims] += err;
  }
  if (end > begin) {
    for (float& g : grad) g /= static_cast<float>(end - begin);
  }
  return grad;
}

// A data worker: one shard of the training set (it generates the whole set
// from the seed and keeps its contiguous slice, so no data travel), handing out
// the gradient of the next minibatch, cycling through the shard. Not
// thread-safe: an actor with the default max_concurrency of 1.
class DataWorker {
 public:
  static DataWorker* Create(DataConfig config, int shard, int num_shards, int batch_size) {
    if (num_shards < 1 || shard < 0 || shard >= num_shards || batch_size < 1) {
      throw std::invalid_argument("DataWorker: bad shard " + std::to_string(shard) + " of " +
                                  std::to_string(num_shards) + " or batch size " +
                                  std::to_string(batch_size));
    }
    Dataset all = TrainSet(config);
    size_t begin = all.size() * shard / num_shards;
    size_t end = all.size() * (shard + 1) / num_shards;
    if (begin == end)
      throw std::invalid_argument("DataWorker: shard " + std::to_string(shard) + " is empty");
    Dataset mine;
    mine.dims = all.dims;
    mine.x.assign(all.x.begin() + begin * all.dims, all.x.begin() + end * all.dims);
    mine.y.assign(all.y.begin() + begin, all.y.begin() + end);
    return new DataWorker(std::move(mine), static_cast<size_t>(batch_size));
  }

  // The gradient at `weights` of the next minibatch. Throws
  // std::invalid_argument if `weights` has the wrong size.
  std::vector<float> ComputeGradient(std::vector<float> weights) {
    if (weights.size() != static_cast<size_t>(data_.dims) + 1) {
      throw std::invalid_argument("DataWorker::ComputeGradient: expected " +
                                  std::to_string(data_.dims + 1) + " weights, got " +
                                  std::to_string(weights.size()));
    }
    size_t begin = next_;
    size_t end = std::min(begin + batch_size_, data_.size());
    next_ = end == data_.size() ? 0 : end;
    return Gradient(weights, data_, begin, end);
  }

 private:
  DataWorker(Dataset data, size_t batch_size) : data_(std::move(data)), batch_size_(batch_size) {}

  Dataset data_;
  size_t batch_size_;
  size_t next_ = 0;
};

struct TrainOptions {
  int workers = 4;
  // Synchronous: steps, each with one gradient from every worker. Asynchronous:
  // iterations * workers pushes of one gradient each, the same amount of work.
  int iterations = 50;
  int batch_size = 100;
  lumen::train::OptimizerConfig optimizer{.learning_rate = 0.02f, .momentum = 0.9f};
  DataConfig data;
  // Every log_every iterations the test-set loss goes to *log, if set, as
  // "<mode>: iteration <i> loss <l>".
  int log_every = 10;
  std::ostream* log = nullptr;
};

struct TrainResult {
  std::vector<double> losses;  // test-set loss at each log point, starting with the initial weights
  double loss = 0.0;           // final test-set loss
  double accuracy = 0.0;       // final test-set accuracy
  int64_t version = 0;         // optimiser steps the server applied
  double seconds = 0.0;
};

namespace internal {

inline void Validate(const TrainOptions& options) {
  if (options.workers < 1) throw std::invalid_argument("workers must be >= 1");
  if (options.iterations < 1) throw std::invalid_argument("iterations must be >= 1");
  if (options.log_every < 1) throw std::invalid_argument("log_every must be >= 1");
}

inline std::vector<lumen::ActorHandle<DataWorker>> StartWorkers(const TrainOptions& options) {
  std::vector<lumen::ActorHandle<DataWorker>> workers;
  for (int i = 0; i < options.workers; ++i) {
    workers.push_back(lumen::Actor(DataWorker::Create)
                          .Remote(options.data, i, options.workers, options.batch_size));
  }
  return workers;
}

inline void Record(const char* mode, int iteration, const std::vector<float>& weights,
                   const Dataset& test, const TrainOptions& options, TrainResult& result) {
  Evaluation e = Evaluate(weights, test);
  result.losses.push_back(e.loss);
  if (options.log != nullptr) {
    *options.log << mode << ": iteration " << iteration << " loss " << e.loss << "\n";
    options.log->flush();
  }
}

}  // namespace internal

// Synchronous data-parallel SGD: each iteration every worker computes a
// gradient at the same weights, and the server applies their average. The
// weights go to the workers as the server's reply (an ObjectRef), never through
// this process; the gradients are gathered here for the one ApplyGradients
// call. Throws std::invalid_argument for bad options, and lumen errors of the
// actors' calls.
inline TrainResult RunSync(const TrainOptions& options) {
  using lumen::train::ParameterServer;
  internal::Validate(options);
  auto start = std::chrono::steady_clock::now();
  Dataset test = TestSet(options.data);
  TrainResult result;
  std::vector<float> initial(NumParameters(options.data), 0.f);
  auto ps = lumen::Actor(ParameterServer::Create).Remote(initial, options.optimizer);
  auto workers = internal::StartWorkers(options);
  internal::Record("sync", 0, initial, test, options, result);

  lumen::ObjectRef<std::vector<float>> weights = lumen::Put(initial);
  for (int it = 1; it <= options.iterations; ++it) {
    std::vector<lumen::ObjectRef<std::vector<float>>> gradient_refs;
    for (auto& worker : workers) {
      gradient_refs.push_back(worker.Task(&DataWorker::ComputeGradient).Remote(weights));
    }
    std::vector<std::vector<float>> gradients;
    for (auto& g : lumen::Get(gradient_refs)) gradients.push_back(std::move(*g));
    weights = ps.Task(&ParameterServer::ApplyGradients).Remote(std::move(gradients));
    if (it % options.log_every == 0 && it != options.iterations) {
      internal::Record("sync", it, *lumen::Get(weights), test, options, result);
    }
  }
  std::vector<float> final_weights = *lumen::Get(weights);
  internal::Record("sync", options.iterations, final_weights, test, options, result);
  Evaluation e = Evaluate(final_weights, test);
  result.loss = e.loss;
  result.accuracy = e.accuracy;
  result.version = *lumen::Get(ps.Task(&ParameterServer::Version).Remote());
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

// Asynchronous SGD (Hogwild-style, one update at a time): every worker pushes
// its gradient as soon as it has it, the server applies it alone, and that
// worker continues from the weights the push returned, while the others may
// still be working from older weights. Runs iterations * workers pushes in all.
// Errors as RunSync.
inline TrainResult RunAsync(const TrainOptions& options) {
  using lumen::train::ParameterServer;
  internal::Validate(options);
  auto start = std::chrono::steady_clock::now();
  Dataset test = TestSet(options.data);
  TrainResult result;
  std::vector<float> initial(NumParameters(options.data), 0.f);
  auto ps = lumen::Actor(ParameterServer::Create).Remote(initial, options.optimizer);
  auto workers = internal::StartWorkers(options);
  internal::Record("async", 0, initial, test, options, result);

  const int64_t total = static_cast<int64_t>(options.iterations) * options.workers;
  const int64_t log_every = static_cast<int64_t>(options.log_every) * options.workers;
  lumen::ObjectRef<std::vector<float>> initial_ref = lumen::Put(initial);
  // In flight: one gradient per worker, pending[k] computed by owner[k].
  std::vector<lumen::ObjectRef<std::vector<float>>> pending;
  std::vector<size_t> owner;
  int64_t submitted = 0;
  for (size_t w = 0; w < workers.size() && submitted < total; ++w, ++submitted) {
    pending.push_back(workers[w].Task(&DataWorker::ComputeGradient).Remote(initial_ref));
    owner.push_back(w);
  }
  int64_t pushed = 0;
  while (!pending.empty()) {
    auto ready = lumen::Wait(pending, 1);
    size_t k = 0;
    while (!(pending[k] == ready.ready.front())) ++k;
    std::vector<std::vector<float>> one{std::move(*lumen::Get(pending[k]))};
    size_t w = owner[k];
    pending.erase(pending.begin() + static_cast<ptrdiff_t>(k));
    owner.erase(owner.begin() + static_cast<ptrdiff_t>(k));
    auto weights = ps.Task(&ParameterServer::ApplyGradients).Remote(std::move(one));
    ++pushed;
    if (submitted < total) {
      pending.push_back(workers[w].Task(&DataWorker::ComputeGradient).Remote(weights));
      owner.push_back(w);
      ++submitted;
    }
    if (pushed % log_every == 0 && pushed != total) {
      internal::Record("async", static_cast<int>(pushed / options.workers), *lumen::Get(weights),
                       test, options, result);
    }
  }
  std::vector<float> final_weights = *lumen::Get(ps.Task(&ParameterServer::GetWeights).Remote());
  internal::Record("async", options.iterations, final_weights, test, options, result);
  Evaluation e = Evaluate(final_weights, test);
  result.loss = e.loss;
  result.accuracy = e.accuracy;
  result.version = *lumen::Get(ps.Task(&ParameterServer::Version).Remote());
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace ps_example

LUMEN_REMOTE(ps_example::DataWorker::Create, &ps_example::DataWorker::ComputeGradient);
