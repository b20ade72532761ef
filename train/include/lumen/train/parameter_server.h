// A parameter server: an actor that holds a model's parameters as one flat
// std::vector<float> and applies gradients to them with SGD and momentum, one
// update at a time. Data workers compute gradients on their shard of the data
// from the weights the server hands out; the server averages the gradients of
// one push and takes one optimiser step (Ray's parameter-server pattern).
//
//   #include <lumen/lumen.h>
//   #include <lumen/train/parameter_server.h>  // also registers the actor's methods
//
//   using lumen::train::ParameterServer;
//   auto ps = lumen::Actor(ParameterServer::Create)
//                 .Remote(std::vector<float>(num_params, 0.f),
//                         lumen::train::OptimizerConfig{.learning_rate = 0.1f, .momentum = 0.9f});
//   // Synchronous step: the gradients of every worker, averaged into one update.
//   lumen::ObjectRef<std::vector<float>> weights =
//       ps.Task(&ParameterServer::ApplyGradients).Remote(gradients);
//   // Workers take the new weights straight from the reply, without the driver
//   // copying them: an ObjectRef<std::vector<float>> passes as a std::vector<float>.
//   auto next = worker.Task(&DataWorker::ComputeGradient).Remote(weights);
//   int64_t steps = *lumen::Get(ps.Task(&ParameterServer::Version).Remote());
//
// Asynchronous training is the same call with one gradient per push
// (ApplyGradients({g})) as each worker finishes; the actor runs its calls one
// at a time, so pushes never interleave.
//
// Including this header registers ParameterServer's factory and methods
// (LUMEN_REMOTE) in every binary that includes it, so drivers and the workers
// that re-execute them agree on the names.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "lumen/lumen.h"

namespace lumen::train {

// Stochastic gradient descent with (heavy-ball) momentum, as in PyTorch's SGD:
//   velocity = momentum * velocity + gradient
//   weights  = weights - learning_rate * velocity
// momentum = 0 is plain SGD.
struct OptimizerConfig {
  float learning_rate = 0.01f;
  float momentum = 0.0f;
  LUMEN_SERIALIZE(learning_rate, momentum);
};

// Holds the parameters and the optimiser state. Not thread-safe: use it as an
// actor (lumen::Actor(ParameterServer::Create)), whose calls run one at a time
// with the default max_concurrency of 1; do not raise SetMaxConcurrency.
class ParameterServer {
 public:
  // The actor's factory. Throws std::invalid_argument (failing the actor's
  // creation, so its calls raise lumen::ActorDiedError with this message) if
  // the learning rate is not a positive finite number or the momentum is not in
  // [0, 1). The caller owns the result (the runtime does, for an actor).
  static ParameterServer* Create(std::vector<float> initial_weights, OptimizerConfig config) {
    if (!std::isfinite(config.learning_rate) || config.learning_rate <= 0.f) {
      throw std::invalid_argument("ParameterServer: learning_rate must be a positive number, got " +
                                  std::to_string(config.learning_rate));
    }
    if (!(config.momentum >= 0.f && config.momentum < 1.f)) {
      throw std::invalid_argument("ParameterServer: momentum must be in [0, 1), got " +
                                  std::to_string(config.momentum));
    }
    return new ParameterServer(std::move(initial_weights), config);
  }

  // Averages `gradients` element-wise, takes one optimiser step with the
  // average and returns the new weights. Throws std::invalid_argument (which a
  // caller's lumen::Get raises as lumen::TaskError) if `gradients` is empty or
  // any gradient's size differs from the weights'; the weights are then left
  // unchanged.
  std::vector<float> ApplyGradients(std::vector<std::vector<float>> gradients) {
    if (gradients.empty()) {
      throw std::invalid_argument("ParameterServer::ApplyGradients: no gradients given");
    }
    for (size_t g = 0; g < gradients.size(); ++g) {
      if (gradients[g].size() != weights_.size()) {
        throw std::invalid_argument(
            "ParameterServer::ApplyGradients: gradient " + std::to_string(g) + " has " +
            std::to_string(gradients[g].size()) + " elements, the weights have " +
            std::to_string(weights_.size()));
      }
    }
    const float scale = 1.f / static_cast<float>(gradients.size());
    for (size_t i = 0; i < weights_.size(); ++i) {
      float sum = 0.f;
      for (const auto& gradient : gradients) sum += gradient[i];
      velocity_[i] = config_.momentum * velocity_[i] + sum * scale;
      weights_[i] -= config_.learning_rate * velocity_[i];
    }
    ++version_;
    return weights_;
  }

  // The current weights (a copy).
  std::vector<float> GetWeights() { return weights_; }

  // How many ApplyGradients calls have succeeded.
  int64_t Version() { return version_; }

 private:
  ParameterServer(std::vector<float> weights, OptimizerConfig config)
      : weights_(std::move(weights)), velocity_(weights_.size(), 0.f), config_(config) {}

  std::vector<float> weights_;
  std::vector<float> velocity_;  // the momentum buffer, same size as weights_
  OptimizerConfig config_;
  int64_t version_ = 0;
};

}  // namespace lumen::train

// Registered under fully qualified names, at namespace scope: each translation
// unit that includes this header registers the same entries again, which the
// registry treats as the same function.
LUMEN_REMOTE(lumen::train::ParameterServer::Create, &lumen::train::ParameterServer::ApplyGradients,
             &lumen::train::ParameterServer::GetWeights, &lumen::train::ParameterServer::Version);
