// DataParallelTrainer on real embedded clusters: the linear-regression example
// converges with 1 and 2 workers; shards are disjoint and complete per epoch
// and reshuffled; Report is a barrier; checkpoints are written, pruned and
// kept by score; a worker SIGKILLed mid-run is replaced and the run resumes
// from its latest checkpoint; max_failures exhausted returns the error and the
// last checkpoint; unmeetable demand fails Fit with a clear error; a 2-node
// loopback cluster with SPREAD placement.
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "examples/linear_regression.h"
#include "examples/mlp.h"
#include "lumen/lumen.h"
#include "lumen/train/trainer.h"
#include "test/core/test_support.h"

namespace fs = std::filesystem;
namespace col = lumen::collective;
using lumen::test::MultiNodeCluster;
using lumen::test::NowNs;
using lumen::test::ScopedCluster;
using lumen::PlacementStrategy;
using namespace lumen::train;

namespace {

// A directory of its own under $TMPDIR, removed at scope exit.
struct ScratchDir {
  ScratchDir() {
    std::string pattern = (fs::temp_directory_path() / "trainer-test-XXXXXX").string();
    path = ::mkdtemp(pattern.data());
  }
  ~ScratchDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string path;
};

std::vector<std::string> CheckpointDirs(const std::string& run_dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(run_dir)) {
    std::string name = e.path().filename().string();
    if (name.find("checkpoint_") != std::string::npos) names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

Dataset LinregData() {
  std::vector<float> x, y;
  linreg_example::MakeData(200, &x, &y);
  return Dataset::FromVectors(x, y, /*rows_per_block=*/64);
}

Result FitLinreg(int workers, const std::string& storage, TrainLoopConfig extra = {},
                 FailureConfig failure = {}, PlacementStrategy strategy = PlacementStrategy::PACK) {
  TrainLoopConfig config{{"lr", 0.05}, {"epochs", 20}, {"batch_size", 16}};
  config.insert(extra.begin(), extra.end());
  DataParallelTrainer trainer(
      linreg_example::TrainLoop, config,
      ScalingConfig{.num_workers = workers, .placement_strategy = strategy,
                    .collective_timeout = std::chrono::seconds(20)},
      RunConfig{.name = "linreg", .storage_path = storage, .failure = failure,
                .checkpoint = {.num_to_keep = 2}, .verbose = false},
      {{"train", LinregData()}});
  return trainer.Fit();
}

// Each epoch, every rank gathers the row ids (the feature of row i is i) its
// shard yielded; rank 0 reports how many distinct rows the ranks saw together,
// how many in all, and whether its own order changed since the last epoch.
void ShardProbeLoop(TrainContext& ctx) {
  auto shard = ctx.GetDatasetShard("rows");
  std::vector<int64_t> previous;
  for (int epoch = 0; epoch < ctx.Config<int>("epochs"); ++epoch) {
    std::vector<int64_t> mine;
    for (const Batch& b : shard.Batches(3, epoch)) {
      for (int64_t i = 0; i < b.size; ++i) mine.push_back(static_cast<int64_t>(b.x(i)[0]));
    }
    std::vector<int64_t> all(mine.size() * ctx.GetWorldSize());
    col::AllGather(std::span<const int64_t>(mine), std::span<int64_t>(all), ctx.GroupName());
    const std::set<int64_t> distinct(all.begin(), all.end());
    ctx.Report({{"epoch", epoch},
                {"distinct", static_cast<double>(distinct.size())},
                {"total", static_cast<double>(all.size())},
                {"shard_rows", static_cast<double>(mine.size())},
                {"changed", epoch > 0 && mine != previous ? 1 : 0}});
    previous = mine;
  }
}

// Rank 1 arrives late at each Report; every rank records when it entered and
// left; rank 0 reports whether every exit came after every entry.
void BarrierLoop(TrainContext& ctx) {
  bool ordered = true;
  for (int k = 0; k < 3; ++k) {
    if (ctx.GetWorldRank() == 1) std::this_thread::sleep_for(std::chrono::milliseconds(150));
    std::vector<int64_t> mine{NowNs(), 0};
    ctx.Report({{"k", k}});
    mine[1] = NowNs();
    std::vector<int64_t> all(2 * ctx.GetWorldSize());
    col::AllGather(std::span<const int64_t>(mine), std::span<int64_t>(all), ctx.GroupName());
    int64_t last_entry = 0, first_exit = INT64_MAX;
    for (int r = 0; r < ctx.GetWorldSize(); ++r) {
      last_entry = std::max(last_entry, all[2 * r]);
      first_exit = std::min(first_exit, all[2 * r + 1]);
    }
    ordered = ordered && last_entry <= first_exit;
  }
  ctx.Report({{"ordered", ordered ? 1 : 0}});
}

// Reports a score per epoch, {5, 9, 1, 3}, each with a checkpoint holding it;
// "seen": whether on every rank GetCheckpoint() was the previous epoch's
// checkpoint, complete on disk.
void ScoreLoop(TrainContext& ctx) {
  const double scores[] = {5, 9, 1, 3};
  for (int epoch = 0; epoch < 4; ++epoch) {
    std::vector<int32_t> seen{1};
    if (epoch > 0) {
      auto c = ctx.GetCheckpoint();
      seen[0] = c && c->index == epoch - 1 && fs::exists(fs::path(c->path) / "score");
    }
    ctx.AllReduce(seen, col::ReduceOp::kMin);
    const std::string dir = ctx.NewCheckpointDir();
    std::ofstream(fs::path(dir) / "score") << scores[epoch];
    ctx.Report({{"epoch", epoch}, {"score", scores[epoch]}, {"seen", seen[0]}}, dir);
  }
}

// Rank 0 reports where the group's workers run: how many nodes, the local
// ranks and local world sizes seen, the world size and a config value.
void PlacementProbeLoop(TrainContext& ctx) {
  std::vector<int64_t> mine{ctx.GetNodeRank(), ctx.GetLocalRank(), ctx.GetLocalWorldSize()};
  std::vector<int64_t> all(3 * ctx.GetWorldSize());
  col::AllGather(std::span<const int64_t>(mine), std::span<int64_t>(all), ctx.GroupName());
  std::set<int64_t> nodes, local_ranks;
  int64_t max_local_world = 0;
  for (int r = 0; r < ctx.GetWorldSize(); ++r) {
    nodes.insert(all[3 * r]);
    local_ranks.insert(all[3 * r + 1]);
    max_local_world = std::max(max_local_world, all[3 * r + 2]);
  }
  ctx.Report({{"nodes", static_cast<double>(nodes.size())},
              {"local_ranks", static_cast<double>(local_ranks.size())},
              {"max_local_world", static_cast<double>(max_local_world)},
              {"world", static_cast<double>(ctx.GetWorldSize())},
              {"answer", ctx.Config<double>("answer")},
              {"name_ok", ctx.GetExperimentName() == "probe" ? 1 : 0}});
}

// Four steps of three gradients (700, 300 and 1000 floats; rank r's element i
// is (r + 1) * (i + 1), accumulated over the steps of an accumulation window)
// through a GradientBucketer of 1 KiB buckets; rank 0 reports the largest
// error against the expected average, how many steps communicated and how
// many buckets went out.
void BucketLoop(TrainContext& ctx) {
  const int accumulation = ctx.Config<int>("accumulation_steps");
  GradientBucketer buckets(ctx, BucketOptions{.overlap = ctx.Config<int>("overlap") != 0,
                                              .accumulation_steps = accumulation,
                                              .bucket_bytes = 1024});
  std::vector<float> grads(2000, 0.f);
  const std::span<float> all(grads);
  const int world = ctx.GetWorldSize();
  double max_error = 0;
  int syncs = 0;
  for (int step = 0; step < 4; ++step) {
    for (size_t i = 0; i < grads.size(); ++i) grads[i] += (ctx.GetWorldRank() + 1.f) * (i + 1.f);
    buckets.Ready(all.subspan(1300, 700));  // the last layer first, as backward goes
    buckets.Ready(all.subspan(1000, 300));
    buckets.Ready(all.subspan(0, 1000));
    if (!buckets.Finish()) continue;
    ++syncs;
    for (size_t i = 0; i < grads.size(); ++i) {
      const double expected = (world + 1) / 2.0 * (i + 1.0);  // mean over ranks of (r + 1)(i + 1)
      max_error = std::max(max_error, std::abs(grads[i] - expected) / expected);
    }
    std::fill(grads.begin(), grads.end(), 0.f);
  }
  ctx.Report({{"max_error", max_error},
              {"syncs", syncs},
              {"buckets", static_cast<double>(buckets.buckets_sent())}});
}

// Batches are made ahead of the loop: before it takes the first, the stream
// fills its prefetch depth (2), and never holds more. Rank 0 reports whether
// it did and how many batches it got.
void PrefetchLoop(TrainContext& ctx) {
  auto shard = ctx.GetDatasetShard("rows");
  BatchStream& stream = shard.Batches(4, /*seed=*/0, /*prefetch=*/2);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (stream.buffered() < 2 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();  // polls the producer's progress, bounded by the deadline
  }
  const bool ahead = stream.buffered() == 2;
  size_t most = 0;
  int batches = 0;
  for (const Batch& b : stream) {
    most = std::max(most, stream.buffered());
    batches += b.size > 0;
  }
  ctx.Report({{"ahead", ahead ? 1 : 0},
              {"most_buffered", static_cast<double>(most)},
              {"batches", batches},
              {"expected_batches", static_cast<double>(stream.num_batches())}});
}

}  // namespace

LUMEN_TRAIN_LOOP(PrefetchLoop);
LUMEN_TRAIN_LOOP(BucketLoop);
LUMEN_TRAIN_LOOP(ShardProbeLoop);
LUMEN_TRAIN_LOOP(BarrierLoop);
LUMEN_TRAIN_LOOP(ScoreLoop);
LUMEN_TRAIN_LOOP(PlacementProbeLoop);

TEST_CASE("trainer: linear regression converges with 1 and 2 workers and checkpoints are pruned to 2") {
  // Invariant: y = 2x + 1 is fitted to within 0.05 whatever the number of
  // workers; every epoch is reported once, in order; only the newest
  // num_to_keep checkpoints remain, complete and renamed.
  ScopedCluster cluster;
  for (int workers : {1, 2}) {
    ScratchDir storage;
    Result result = FitLinreg(workers, storage.path);
    INFO(workers << " worker(s): " << result.error.value_or("ok"));
    REQUIRE(result.ok());
    CHECK(result.metrics["weight"] == Approx(2).margin(0.05));
    CHECK(result.metrics["bias"] == Approx(1).margin(0.05));
    REQUIRE(result.history.size() == 20);
    for (int e = 0; e < 20; ++e) REQUIRE(result.history[e]["epoch"] == e);
    CHECK(result.history.back()["loss"] < result.history.front()["loss"] / 100);
    CHECK(result.metrics[kSamplesPerSecond] > 0);
    CHECK(result.metrics[kSteps] == (workers == 1 ? 13 : 7));  // ceil(200 / workers / 16)
    REQUIRE(result.checkpoint.has_value());
    CHECK(result.checkpoint->index == 19);
    CHECK(CheckpointDirs(result.path) ==
          std::vector<std::string>{"checkpoint_000018", "checkpoint_000019"});
    CHECK(fs::exists(fs::path(result.checkpoint->path) / "model.txt"));
    std::ifstream csv(fs::path(result.path) / "metrics.csv");
    int lines = 0;
    for (std::string line; std::getline(csv, line);) ++lines;
    CHECK(lines == 21);
    CHECK(result.num_failures == 0);
    CHECK(result.time.compute_share + result.time.allreduce_share +
              result.time.data_wait_share + result.time.checkpoint_share +
              result.time.framework_share <=
          1.0001);
    CHECK(result.history.back().contains(kTimeFrameworkS));
  }
}

TEST_CASE("trainer: shards are disjoint and complete for 1, 2 and 3 workers and reshuffled per epoch") {
  // Invariant: per epoch the ranks together see every row (padding repeats
  // a few to even the shards; drop_last drops them instead), and rank 0's
  // rows change from one epoch to the next.
  lumen::Config config = ScopedCluster::DefaultConfig();
  config.num_cpus = 3;
  ScopedCluster cluster(config);
  std::vector<float> ids(20), labels(20, 0.f);
  for (int i = 0; i < 20; ++i) ids[i] = static_cast<float>(i);
  Dataset rows = Dataset::FromVectors(ids, labels, /*rows_per_block=*/6);  // 4 blocks
  for (int workers : {1, 2, 3}) {
    for (bool drop_last : {false, true}) {
      ScratchDir storage;
      DataParallelTrainer trainer(ShardProbeLoop, {{"epochs", 3}},
                                  ScalingConfig{.num_workers = workers},
                                  RunConfig{.name = "shards", .storage_path = storage.path,
                                            .verbose = false},
                                  {{"rows", rows}});
      trainer.SetDropLast(drop_last);
      Result result = trainer.Fit();
      INFO(workers << " workers, drop_last " << drop_last << ": " << result.error.value_or("ok"));
      REQUIRE(result.ok());
      REQUIRE(result.history.size() == 3);
      const int per_rank = drop_last ? 20 / workers : (20 + workers - 1) / workers;
      for (const auto& m : result.history) {
        CHECK(m.at("shard_rows") == per_rank);
        CHECK(m.at("total") == per_rank * workers);
        CHECK(m.at("distinct") == (drop_last ? per_rank * workers : 20));
      }
      CHECK(result.history[1].at("changed") == 1);
      CHECK(result.history[2].at("changed") == 1);
    }
  }
}

TEST_CASE("trainer: Report is a barrier and worker ranks and config reach the loop") {
  // Invariant: no rank leaves Report k before every rank entered it, even when
  // one arrives late; on one node two workers are local ranks 0 and 1.
  ScopedCluster cluster;
  ScratchDir storage;
  Result barrier = DataParallelTrainer(BarrierLoop, {}, ScalingConfig{.num_workers = 2},
                                       RunConfig{.name = "barrier", .storage_path = storage.path,
                                                 .verbose = false})
                       .Fit();
  INFO(barrier.error.value_or("ok"));
  REQUIRE(barrier.ok());
  REQUIRE(barrier.history.size() == 4);
  CHECK(barrier.metrics.at("ordered") == 1);
  // Rank 0's wait for rank 1 in report 0's barrier shows as all-reduce
  // (synchronisation) time of the next report, not as compute.
  CHECK(barrier.history[1].at(kTimeAllReduceS) > 0.1);

  Result probe = DataParallelTrainer(PlacementProbeLoop, {{"answer", 42}},
                                     ScalingConfig{.num_workers = 2},
                                     RunConfig{.name = "probe", .storage_path = storage.path,
                                               .verbose = false})
                     .Fit();
  REQUIRE(probe.ok());
  CHECK(probe.metrics.at("nodes") == 1);
  CHECK(probe.metrics.at("local_ranks") == 2);
  CHECK(probe.metrics.at("max_local_world") == 2);
  CHECK(probe.metrics.at("world") == 2);
  CHECK(probe.metrics.at("answer") == 42);
  CHECK(probe.metrics.at("name_ok") == 1);
}

TEST_CASE("trainer: checkpoints kept by score, the latest kept too, and resume from storage") {
  // Invariant: with a score attribute the best num_to_keep checkpoints stay on
  // disk (plus the latest); a new run with resume_from_storage starts from the
  // newest checkpoint found there.
  ScopedCluster cluster;
  ScratchDir storage;
  RunConfig run{.name = "scores", .storage_path = storage.path,
                .checkpoint = {.num_to_keep = 2, .checkpoint_score_attribute = "score",
                               .checkpoint_score_order = CheckpointOrder::kMax},
                .verbose = false};
  Result result = DataParallelTrainer(ScoreLoop, {}, ScalingConfig{.num_workers = 2}, run).Fit();
  REQUIRE(result.ok());
  for (const auto& m : result.history) CHECK(m.at("seen") == 1);
  CHECK(CheckpointDirs(result.path) == std::vector<std::string>{
                                           "checkpoint_000000", "checkpoint_000001",
                                           "checkpoint_000003"});
  REQUIRE(result.best_checkpoints.size() == 3);
  CHECK(result.best_checkpoints[0].index == 1);  // score 9
  CHECK(result.best_checkpoints[0].metrics.at("score") == 9);
  CHECK(result.best_checkpoints[1].index == 0);  // score 5
  CHECK(result.checkpoint->index == 3);
  std::ifstream score(fs::path(result.best_checkpoints[0].path) / "score");
  double s = 0;
  score >> s;
  CHECK(s == 9);

  // Resume: the linear regression's checkpoints after 20 epochs; 30 epochs
  // now, starting from the newest (epoch 19): 10 more reports.
  ScratchDir lr_storage;
  REQUIRE(FitLinreg(1, lr_storage.path).ok());
  DataParallelTrainer resumed(
      linreg_example::TrainLoop, {{"lr", 0.05}, {"epochs", 30}, {"batch_size", 16}},
      ScalingConfig{.num_workers = 1},
      RunConfig{.name = "linreg", .storage_path = lr_storage.path,
                .checkpoint = {.num_to_keep = 2}, .resume_from_storage = true, .verbose = false},
      {{"train", LinregData()}});
  Result more = resumed.Fit();
  REQUIRE(more.ok());
  REQUIRE(more.history.size() == 10);
  CHECK(more.history.front().at("epoch") == 20);
  CHECK(more.checkpoint->index == 29);
  CHECK(CheckpointDirs(more.path) ==
        std::vector<std::string>{"checkpoint_000028", "checkpoint_000029"});
}

TEST_CASE("trainer: a worker SIGKILLed mid-run is replaced and the run resumes and converges") {
  // Invariant: after the failure the new group starts from the latest
  // checkpoint (epoch 4), so every epoch is reported exactly once, in order,
  // and the fit is as good as without the failure.
  ScopedCluster cluster;
  ScratchDir storage;
  Result result = FitLinreg(2, storage.path, {{"kill_rank", 1}, {"kill_epoch", 5}},
                            FailureConfig{.max_failures = 2});
  INFO(result.error.value_or("ok"));
  REQUIRE(result.ok());
  CHECK(result.num_failures == 1);
  REQUIRE(result.history.size() == 20);
  for (int e = 0; e < 20; ++e) REQUIRE(result.history[e]["epoch"] == e);
  CHECK(result.metrics["weight"] == Approx(2).margin(0.05));
  CHECK(result.metrics["bias"] == Approx(1).margin(0.05));
  CHECK(result.checkpoint->index == 19);
}

TEST_CASE("trainer: max_failures exhausted returns the error and the last checkpoint") {
  // Invariant: a group that fails on every attempt is replaced max_failures
  // times, then Fit returns (no exception) with the error and the checkpoint
  // of the last good epoch.
  ScopedCluster cluster;
  ScratchDir storage;
  Result result = FitLinreg(2, storage.path,
                            {{"kill_rank", 1}, {"kill_epoch", 3}, {"kill_always", 1}},
                            FailureConfig{.max_failures = 1});
  REQUIRE_FALSE(result.ok());
  CHECK(result.num_failures == 2);
  CHECK_THAT(*result.error, Catch::Contains("max_failures 1"));
  REQUIRE(result.checkpoint.has_value());
  CHECK(result.checkpoint->index == 2);
  CHECK(fs::exists(fs::path(result.checkpoint->path) / "model.txt"));
  CHECK(result.history.size() == 3);
}

TEST_CASE("trainer: demand the cluster cannot meet fails Fit with a clear error in time") {
  // Invariant: Fit never hangs on an unplaceable group: after the configured
  // wait it returns an error naming the demand.
  ScopedCluster cluster;
  ScratchDir storage;
  auto start = std::chrono::steady_clock::now();
  Result result = DataParallelTrainer(
                      PlacementProbeLoop, {{"answer", 1}},
                      ScalingConfig{.num_workers = 2,
                                    .resources_per_worker = {{"CPU", 1}, {"accelerator_x", 1}},
                                    .placement_timeout = std::chrono::milliseconds(300)},
                      RunConfig{.name = "probe", .storage_path = storage.path, .verbose = false})
                      .Fit();
  REQUIRE_FALSE(result.ok());
  CHECK_THAT(*result.error, Catch::Contains("cannot place 2 workers") &&
                                Catch::Contains("accelerator_x") && Catch::Contains("300 ms"));
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(20));
  CHECK(result.history.empty());
}

TEST_CASE("trainer: a 2-node loopback cluster with SPREAD placement") {
  // Invariant: SPREAD puts the two workers on different nodes (node ranks 0
  // and 1, each local rank 0 of 1), and the fit converges across them.
  MultiNodeCluster cluster({{{{"CPU", 2}}}, {{{"CPU", 2}}}});
  ScratchDir storage;
  Result probe = DataParallelTrainer(
                     PlacementProbeLoop, {{"answer", 7}},
                     ScalingConfig{.num_workers = 2,
                                   .placement_strategy = PlacementStrategy::SPREAD},
                     RunConfig{.name = "probe", .storage_path = storage.path, .verbose = false})
                     .Fit();
  INFO(probe.error.value_or("ok"));
  REQUIRE(probe.ok());
  CHECK(probe.metrics.at("nodes") == 2);
  CHECK(probe.metrics.at("local_ranks") == 1);
  CHECK(probe.metrics.at("max_local_world") == 1);
  Result fit = FitLinreg(2, storage.path, {}, {}, PlacementStrategy::SPREAD);
  INFO(fit.error.value_or("ok"));
  REQUIRE(fit.ok());
  CHECK(fit.metrics["weight"] == Approx(2).margin(0.05));
  CHECK(fit.metrics["bias"] == Approx(1).margin(0.05));
}

TEST_CASE("trainer: bucketed gradient all-reduce, overlapped or not, with accumulation") {
  // Invariant: however the gradients are bucketed (one bucket per ready
  // gradient here when overlapped, bucket-sized pieces when not) and however
  // many steps are accumulated, every element ends as the average over the
  // ranks; only every accumulation_steps-th step communicates.
  ScopedCluster cluster;
  ScratchDir storage;
  struct Case {
    int overlap, accumulation, syncs, buckets;
  };
  for (Case c : {Case{1, 1, 4, 4 * 3}, Case{0, 1, 4, 4 * 8}, Case{1, 2, 2, 2 * 3}}) {
    Result r = DataParallelTrainer(BucketLoop,
                                   {{"overlap", c.overlap}, {"accumulation_steps", c.accumulation}},
                                   ScalingConfig{.num_workers = 2},
                                   RunConfig{.name = "buckets", .storage_path = storage.path,
                                             .verbose = false})
                   .Fit();
    INFO("overlap " << c.overlap << " accumulation " << c.accumulation << ": "
                    << r.error.value_or("ok"));
    REQUIRE(r.ok());
    CHECK(r.metrics.at("max_error") < 1e-6);
    CHECK(r.metrics.at("syncs") == c.syncs);
    CHECK(r.metrics.at("buckets") == c.buckets);
  }
}

TEST_CASE("trainer: the MLP example learns its blobs on 2 workers") {
  // Invariant: hand-written backward + bucketed averaging train the model:
  // held-in accuracy over 90% after 3 epochs, loss falling.
  ScopedCluster cluster;
  ScratchDir storage;
  std::vector<float> x, y;
  mlp_example::MakeData(1024, 8, 3, &x, &y);
  Result r = DataParallelTrainer(
                 mlp_example::TrainLoop,
                 {{"epochs", 3}, {"global_batch", 32}, {"lr", 0.1}, {"inputs", 8}, {"hidden", 16},
                  {"classes", 3}, {"bucket_kib", 1}},
                 ScalingConfig{.num_workers = 2},
                 RunConfig{.name = "mlp", .storage_path = storage.path,
                           .checkpoint = {.num_to_keep = 1}, .verbose = false},
                 {{"train", Dataset::FromArrays(x, 8, y, 1)}})
                 .Fit();
  INFO(r.error.value_or("ok"));
  REQUIRE(r.ok());
  REQUIRE(r.history.size() == 3);
  CHECK(r.metrics.at("accuracy") > 0.9);
  CHECK(r.history.back().at("loss") < r.history.front().at("loss"));
  CHECK(CheckpointDirs(r.path) == std::vector<std::string>{"checkpoint_000002"});
}

TEST_CASE("trainer: a node lost mid-run: the group is placed again and resumes") {
  // Invariant: when a node holding a worker dies, the trainer replaces the
  // whole group on what is left and resumes from the latest checkpoint: every
  // epoch reported once, in order, and the fit converges.
  MultiNodeCluster cluster({{{{"CPU", 2}}}, {{{"CPU", 2}}}});
  ScratchDir storage;
  Result result;
  std::thread fit([&] {
    result = FitLinreg(2, storage.path, {{"epoch_sleep_ms", 100}}, FailureConfig{.max_failures = 3},
                       PlacementStrategy::SPREAD);
  });
  const fs::path csv = fs::path(storage.path) / "linreg" / "metrics.csv";
  bool reported = lumen::test::WaitUntil([&] {
    std::ifstream in(csv);
    int lines = 0;
    for (std::string line; std::getline(in, line);) ++lines;
    return lines >= 4;  // header + 3 epochs
  });
  cluster.KillNode(1);
  fit.join();
  REQUIRE(reported);
  INFO(result.error.value_or("ok"));
  REQUIRE(result.ok());
  CHECK(result.num_failures >= 1);
  REQUIRE(result.history.size() == 20);
  for (int e = 0; e < 20; ++e) REQUIRE(result.history[e]["epoch"] == e);
  CHECK(result.metrics["weight"] == Approx(2).margin(0.05));
}

TEST_CASE("trainer: elastic: after a node loss the run goes on with fewer workers, then grows back") {
  // Invariant: with min_workers 1 of 2, losing a node does not stall the run
  // (it continues on one worker from the latest checkpoint); when a node
  // joins again the group grows back to 2; every epoch is reported once, in
  // order, and the fit converges.
  MultiNodeCluster cluster({{{{"CPU", 1}}}, {{{"CPU", 1}}}});
  ScratchDir storage;
  Result result;
  std::thread fit([&] {
    DataParallelTrainer trainer(
        linreg_example::TrainLoop,
        {{"lr", 0.05}, {"epochs", 20}, {"batch_size", 16}, {"epoch_sleep_ms", 250}},
        ScalingConfig{.num_workers = 2,
                      .collective_timeout = std::chrono::seconds(20),
                      .min_workers = 1,
                      .elastic_placement_timeout = std::chrono::milliseconds(500),
                      .elastic_check_period = std::chrono::milliseconds(100)},
        RunConfig{.name = "elastic", .storage_path = storage.path, .failure = {.max_failures = 3},
                  .checkpoint = {.num_to_keep = 2}, .verbose = false},
        {{"train", LinregData()}});
    result = trainer.Fit();
  });
  const fs::path csv = fs::path(storage.path) / "elastic" / "metrics.csv";
  // The world_size column of each report so far (metrics.csv, columns sorted).
  auto world_sizes = [&] {
    std::ifstream in(csv);
    std::string header;
    std::getline(in, header);
    std::vector<std::string> columns;
    std::stringstream hs(header);
    for (std::string c; std::getline(hs, c, ',');) columns.push_back(c);
    const size_t col = std::find(columns.begin(), columns.end(), "world_size") - columns.begin();
    std::vector<int> sizes;
    for (std::string line; std::getline(in, line);) {
      std::stringstream ls(line);
      std::string field;
      for (size_t i = 0; std::getline(ls, field, ','); ++i) {
        if (i == col) sizes.push_back(std::stoi(field));
      }
    }
    return sizes;
  };
  // (No REQUIRE before the join: a failure must not leave the thread running.)
  const bool started = lumen::test::WaitUntil([&] { return world_sizes().size() >= 3; });
  cluster.KillNode(1);
  // Shrunk: two more reports by a group of one.
  bool shrunk = lumen::test::WaitUntil([&] {
    auto s = world_sizes();
    return std::count(s.begin(), s.end(), 1) >= 2;
  }, std::chrono::seconds(30));
  cluster.AddNode({{{"CPU", 1}}});
  fit.join();
  REQUIRE(started);
  REQUIRE(shrunk);
  INFO(result.error.value_or("ok"));
  REQUIRE(result.ok());
  CHECK(result.num_failures == 1);
  REQUIRE(result.history.size() == 20);
  for (int e = 0; e < 20; ++e) REQUIRE(result.history[e]["epoch"] == e);
  CHECK(result.history.front()[kWorldSize] == 2);
  CHECK(result.history.back()[kWorldSize] == 2);  // grown back
  CHECK(result.metrics["weight"] == Approx(2).margin(0.05));
  CHECK(result.metrics["bias"] == Approx(1).margin(0.05));
}

TEST_CASE("trainer: batches are prefetched ahead of the loop, up to the prefetch depth") {
  // Invariant: the data of the next batches is loaded while the loop has not
  // asked for it yet (2 ahead here), and the queue never grows past that.
  ScopedCluster cluster;
  ScratchDir storage;
  std::vector<float> ids(40), labels(40, 0.f);
  for (int i = 0; i < 40; ++i) ids[i] = static_cast<float>(i);
  Result r = DataParallelTrainer(PrefetchLoop, {}, ScalingConfig{.num_workers = 1},
                                 RunConfig{.name = "prefetch", .storage_path = storage.path,
                                           .verbose = false},
                                 {{"rows", Dataset::FromVectors(ids, labels)}})
                 .Fit();
  INFO(r.error.value_or("ok"));
  REQUIRE(r.ok());
  CHECK(r.metrics.at("ahead") == 1);
  CHECK(r.metrics.at("most_buffered") <= 2);
  CHECK(r.metrics.at("batches") == 10);
  CHECK(r.metrics.at("expected_batches") == 10);
}
