// The parameter-server actor (lumen::train::ParameterServer) and the
// parameter-server example's synchronous and asynchronous training, run on a
// real embedded cluster per test case.
#include <catch2/catch.hpp>
#include <cmath>
#include <string>
#include <vector>

#include "examples/parameter_server.h"
#include "lumen/lumen.h"
#include "lumen/train/parameter_server.h"
#include "test/core/test_support.h"

namespace {

using lumen::test::ScopedCluster;
using lumen::train::OptimizerConfig;
using lumen::train::ParameterServer;
using Vec = std::vector<float>;

}  // namespace

TEST_CASE("ParameterServer averages the gradients and applies SGD with momentum") {
  ScopedCluster cluster;
  const OptimizerConfig config{.learning_rate = 0.5f, .momentum = 0.9f};
  auto ps = lumen::Actor(ParameterServer::Create).Remote(Vec{1.f, 2.f, 3.f}, config);
  REQUIRE(*lumen::Get(ps.Task(&ParameterServer::Version).Remote()) == 0);
  REQUIRE(*lumen::Get(ps.Task(&ParameterServer::GetWeights).Remote()) == Vec{1.f, 2.f, 3.f});

  // Step 1: average of {2, 0, -4} and {0, 2, 0} is {1, 1, -2}; velocity = that;
  // w = {1, 2, 3} - 0.5 * {1, 1, -2} = {0.5, 1.5, 4}.
  Vec w1 = *lumen::Get(
      ps.Task(&ParameterServer::ApplyGradients).Remote(std::vector<Vec>{{2, 0, -4}, {0, 2, 0}}));
  REQUIRE(w1 == Vec{0.5f, 1.5f, 4.f});
  // Step 2: velocity = 0.9 * {1, 1, -2} + {1, -1, 2} = {1.9, -0.1, 0.2};
  // w = {0.5, 1.5, 4} - 0.5 * {1.9, -0.1, 0.2} = {-0.45, 1.55, 3.9}.
  Vec w2 =
      *lumen::Get(ps.Task(&ParameterServer::ApplyGradients).Remote(std::vector<Vec>{{1, -1, 2}}));
  const Vec expected{-0.45f, 1.55f, 3.9f};
  REQUIRE(w2.size() == expected.size());
  for (size_t i = 0; i < expected.size(); ++i) REQUIRE(w2[i] == Approx(expected[i]).margin(1e-6));
  REQUIRE(*lumen::Get(ps.Task(&ParameterServer::GetWeights).Remote()) == w2);
  REQUIRE(*lumen::Get(ps.Task(&ParameterServer::Version).Remote()) == 2);
}

TEST_CASE("ParameterServer takes its weights and gradients as ObjectRefs from the store") {
  ScopedCluster cluster;
  // 64 Ki floats (256 KiB): over the inline limit, so both go through shared memory.
  const size_t n = 64 * 1024;
  auto initial = lumen::Put(Vec(n, 1.f));
  auto ps = lumen::Actor(ParameterServer::Create)
                .Remote(initial, OptimizerConfig{.learning_rate = 0.25f, .momentum = 0.f});
  auto gradients = lumen::Put(std::vector<Vec>{Vec(n, 2.f), Vec(n, 6.f)});
  Vec w = *lumen::Get(ps.Task(&ParameterServer::ApplyGradients).Remote(gradients));
  REQUIRE(w.size() == n);
  REQUIRE(w.front() == 0.f);  // 1 - 0.25 * (2 + 6) / 2
  REQUIRE(w.back() == 0.f);
}

TEST_CASE("ParameterServer rejects gradients of the wrong size and keeps its weights") {
  ScopedCluster cluster;
  auto ps = lumen::Actor(ParameterServer::Create)
                .Remote(Vec{1.f, 2.f}, OptimizerConfig{.learning_rate = 0.1f, .momentum = 0.5f});
  auto bad = ps.Task(&ParameterServer::ApplyGradients).Remote(std::vector<Vec>{{1, 1}, {1, 1, 1}});
  try {
    lumen::Get(bad, std::chrono::seconds(30));
    FAIL("ApplyGradients with a 3-element gradient for 2 weights should throw");
  } catch (const lumen::TaskError& e) {
    CHECK(e.exception_type().find("invalid_argument") != std::string::npos);
    CHECK(e.task_message().find("gradient 1 has 3 elements, the weights have 2") !=
          std::string::npos);
  }
  auto none = ps.Task(&ParameterServer::ApplyGradients).Remote(std::vector<Vec>{});
  REQUIRE_THROWS_AS(lumen::Get(none, std::chrono::seconds(30)), lumen::TaskError);
  // Nothing was applied: the actor is alive and unchanged.
  REQUIRE(*lumen::Get(ps.Task(&ParameterServer::GetWeights).Remote()) == Vec{1.f, 2.f});
  REQUIRE(*lumen::Get(ps.Task(&ParameterServer::Version).Remote()) == 0);
}

TEST_CASE("ParameterServer refuses a bad optimiser configuration") {
  ScopedCluster cluster;
  auto ps = lumen::Actor(ParameterServer::Create)
                .Remote(Vec{1.f}, OptimizerConfig{.learning_rate = 0.1f, .momentum = 1.5f});
  try {
    lumen::Get(ps.Task(&ParameterServer::Version).Remote(), std::chrono::seconds(30));
    FAIL("an actor whose factory threw should not answer");
  } catch (const lumen::ActorDiedError& e) {
    REQUIRE(std::string(e.what()).find("momentum must be in [0, 1)") != std::string::npos);
  }
}

TEST_CASE("the example's model: untrained weights score about chance") {
  ps_example::DataConfig data;
  ps_example::Dataset test = ps_example::TestSet(data);
  REQUIRE(test.size() == static_cast<size_t>(data.num_test));
  // Zero weights: every logit is 0, i.e. class 1 for all; classes alternate.
  auto zero = ps_example::Evaluate(Vec(ps_example::NumParameters(data), 0.f), test);
  REQUIRE(zero.accuracy == Approx(0.5));
  REQUIRE(zero.loss == Approx(std::log(2.0)));
  // The data are deterministic.
  REQUIRE(ps_example::TestSet(data).x == test.x);
  REQUIRE(ps_example::TrainSet(data).x != test.x);
}

TEST_CASE("synchronous parameter-server training reaches 90% held-out accuracy") {
  ScopedCluster cluster;
  ps_example::TrainOptions options;  // the example's defaults
  ps_example::TrainResult result = ps_example::RunSync(options);
  INFO("sync accuracy " << result.accuracy << ", loss " << result.loss);
  REQUIRE(result.version == options.iterations);
  REQUIRE(result.accuracy >= 0.9);
  REQUIRE(result.losses.size() >= 2);
  REQUIRE(result.losses.back() < 0.5 * result.losses.front());
}

TEST_CASE("asynchronous parameter-server training reaches 90% held-out accuracy") {
  ScopedCluster cluster;
  ps_example::TrainOptions options;
  ps_example::TrainResult result = ps_example::RunAsync(options);
  INFO("async accuracy " << result.accuracy << ", loss " << result.loss);
  REQUIRE(result.version == static_cast<int64_t>(options.iterations) * options.workers);
  REQUIRE(result.accuracy >= 0.9);
  REQUIRE(result.losses.size() >= 2);
  REQUIRE(result.losses.back() < 0.5 * result.losses.front());
}
