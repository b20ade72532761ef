// The trainer's pure logic, without a cluster: DistributedSampler-style
// shards (ShardIndices), which checkpoints are kept (CheckpointManager), and
// the run log's metrics.csv and console line (RunLog).
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "checkpoint_manager.h"
#include "lumen/train/dataset.h"
#include "run_log.h"

namespace fs = std::filesystem;
using lumen::train::Checkpoint;
using lumen::train::CheckpointConfig;
using lumen::train::CheckpointOrder;
using lumen::train::ShardIndices;
using lumen::train::internal::CheckpointManager;

namespace {

// A directory of its own under $TMPDIR, removed at scope exit.
struct ScratchDir {
  ScratchDir() {
    std::string pattern = (fs::temp_directory_path() / "train-logic-XXXXXX").string();
    path = ::mkdtemp(pattern.data());
  }
  ~ScratchDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string path;
};

Checkpoint Ckpt(int64_t index, std::map<std::string, double> metrics = {}) {
  return Checkpoint{.path = "/nowhere/checkpoint_" + std::to_string(index), .index = index,
                    .metrics = std::move(metrics)};
}

std::vector<int64_t> Indices(const std::vector<Checkpoint>& cs) {
  std::vector<int64_t> out;
  for (const auto& c : cs) out.push_back(c.index);
  return out;
}

}  // namespace

TEST_CASE("ShardIndices: disjoint and complete for 1, 2 and 3 workers, padded or dropped") {
  // Invariant: for one seed, the ranks' shards are the same size; padded, they
  // cover every row (the few extra ones repeat rows); dropped, no row twice.
  for (int64_t n : {10, 12, 200, 7}) {
    for (int world : {1, 2, 3}) {
      for (bool drop_last : {false, true}) {
        std::map<int64_t, int> seen;
        size_t size = 0;
        for (int rank = 0; rank < world; ++rank) {
          auto mine = ShardIndices(n, rank, world, /*seed=*/3, drop_last);
          if (rank == 0) size = mine.size();
          REQUIRE(mine.size() == size);
          for (int64_t i : mine) {
            REQUIRE(i >= 0);
            REQUIRE(i < n);
            seen[i]++;
          }
        }
        INFO("n " << n << " world " << world << " drop_last " << drop_last);
        if (drop_last) {
          REQUIRE(size == static_cast<size_t>(n / world));
          for (const auto& [i, count] : seen) REQUIRE(count == 1);
          REQUIRE(seen.size() == static_cast<size_t>(n / world * world));
        } else {
          REQUIRE(size == static_cast<size_t>((n + world - 1) / world));
          REQUIRE(seen.size() == static_cast<size_t>(n));  // complete
          int repeats = 0;
          for (const auto& [i, count] : seen) repeats += count - 1;
          REQUIRE(repeats == static_cast<int>(size * world - n));
        }
      }
    }
  }
}

TEST_CASE("ShardIndices: reshuffled per seed (epoch), identical for the same seed") {
  // Invariant: the permutation depends only on the seed, so every rank agrees
  // on it, and a new epoch's seed gives a new order and a new split.
  auto a0 = ShardIndices(100, 0, 2, 0, false), a0_again = ShardIndices(100, 0, 2, 0, false);
  auto a1 = ShardIndices(100, 0, 2, 1, false);
  REQUIRE(a0 == a0_again);
  REQUIRE(a0 != a1);
  std::set<int64_t> s0(a0.begin(), a0.end()), s1(a1.begin(), a1.end());
  REQUIRE(s0 != s1);  // not just reordered: rows move between ranks
  REQUIRE(ShardIndices(0, 0, 3, 0, false).empty());
  REQUIRE_THROWS(ShardIndices(10, 3, 3, 0, false));
}

TEST_CASE("CheckpointManager keeps the newest num_to_keep and always the latest") {
  // Invariant: without a score, age decides; deletions are exactly the rest.
  CheckpointManager m(CheckpointConfig{.num_to_keep = 2});
  REQUIRE(m.Add(Ckpt(0)).empty());
  REQUIRE(m.Add(Ckpt(1)).empty());
  REQUIRE(Indices(m.Add(Ckpt(2))) == std::vector<int64_t>{0});
  REQUIRE(Indices(m.Add(Ckpt(3))) == std::vector<int64_t>{1});
  REQUIRE(Indices(m.Kept()) == std::vector<int64_t>{3, 2});
  REQUIRE(m.latest()->index == 3);

  CheckpointManager all(CheckpointConfig{.num_to_keep = 0});
  for (int i = 0; i < 5; ++i) REQUIRE(all.Add(Ckpt(i)).empty());
  REQUIRE(all.Kept().size() == 5);
}

TEST_CASE("CheckpointManager keeps the best by a metric, max or min, plus the latest") {
  // Invariant: the best num_to_keep by the score stay; the latest stays too
  // (a restart resumes from it) even when it scores worse; checkpoints
  // without the metric rank last.
  CheckpointManager best(CheckpointConfig{.num_to_keep = 2, .checkpoint_score_attribute = "acc",
                                          .checkpoint_score_order = CheckpointOrder::kMax});
  REQUIRE(best.Add(Ckpt(0, {{"acc", 0.5}})).empty());
  REQUIRE(best.Add(Ckpt(1, {{"acc", 0.9}})).empty());
  REQUIRE(best.Add(Ckpt(2, {{"acc", 0.1}})).empty());  // the latest: kept for now
  REQUIRE(Indices(best.Add(Ckpt(3, {{"acc", 0.3}}))) == std::vector<int64_t>{2});
  REQUIRE(Indices(best.Kept()) == std::vector<int64_t>{1, 0, 3});
  REQUIRE(Indices(best.Add(Ckpt(4, {}))) == std::vector<int64_t>{3});  // no metric: worst
  REQUIRE(Indices(best.Kept()) == std::vector<int64_t>{1, 0, 4});

  CheckpointManager lowest(CheckpointConfig{.num_to_keep = 1, .checkpoint_score_attribute = "loss",
                                            .checkpoint_score_order = CheckpointOrder::kMin});
  REQUIRE(lowest.Add(Ckpt(0, {{"loss", 2}})).empty());
  REQUIRE(lowest.Add(Ckpt(1, {{"loss", 1}})).size() == 1);
  REQUIRE(Indices(lowest.Add(Ckpt(2, {{"loss", 3}}))).empty());  // 2 is the latest
  REQUIRE(Indices(lowest.Add(Ckpt(3, {{"loss", 4}}))) == std::vector<int64_t>{2});
  REQUIRE(Indices(lowest.Kept()) == std::vector<int64_t>{1, 3});
}

TEST_CASE("CheckpointManager::Scan lists complete checkpoints and removes temporary ones") {
  // Invariant: only renamed checkpoint_NNNNNN directories count; a
  // temporary directory (a crash before the rename) is never taken for one.
  ScratchDir dir;
  for (const char* name : {"checkpoint_000002", "checkpoint_000010", ".tmp_checkpoint_x_r0_1_0"}) {
    fs::create_directories(fs::path(dir.path) / name);
  }
  std::ofstream(fs::path(dir.path) / "metrics.csv") << "report\n";
  auto found = CheckpointManager::Scan(dir.path);
  REQUIRE(Indices(found) == std::vector<int64_t>{2, 10});
  REQUIRE(found[1].path == (fs::path(dir.path) / "checkpoint_000010").string());
  REQUIRE_FALSE(fs::exists(fs::path(dir.path) / ".tmp_checkpoint_x_r0_1_0"));
  REQUIRE(CheckpointManager::Scan(dir.path + "/absent").empty());
}

TEST_CASE("RunLog writes metrics.csv with every metric seen and one line per report") {
  // Invariant: the CSV has one row per report and the union of the columns;
  // the console line names the epoch, the loop's metrics and the time shares.
  ScratchDir dir;
  lumen::train::internal::RunLog log(dir.path, /*verbose=*/false, /*total_epochs=*/2);
  log.Add({{"epoch", 0}, {"loss", 1.5}, {"time_total_s", 2}, {"time_compute_s", 1.5},
           {"time_allreduce_s", 0.5}, {"samples_per_second", 100}});
  log.Add({{"epoch", 1}, {"loss", 0.5}, {"acc", 0.75}, {"time_total_s", 2},
           {"time_compute_s", 1}, {"time_allreduce_s", 1}, {"samples_per_second", 300}});
  std::ifstream in(fs::path(dir.path) / "metrics.csv");
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  REQUIRE(lines.size() == 3);
  REQUIRE(lines[0] ==
          "report,acc,epoch,loss,samples_per_second,time_allreduce_s,time_compute_s,time_total_s");
  REQUIRE(lines[1] == "0,,0,1.5,100,0.5,1.5,2");
  REQUIRE(lines[2] == "1,0.75,1,0.5,300,1,1,2");
  const std::string line = lumen::train::internal::RunLog::Line(log.history()[1]);
  REQUIRE(line == "epoch 1 | acc 0.75 | loss 0.5 | 300 samples/s | compute 50% allreduce 50% "
                  "data 0% ckpt 0% trainer 0%");
  auto summary = log.Summary();
  REQUIRE(summary.samples_per_second == Approx(200));
  REQUIRE(summary.compute_share == Approx(0.625));
  REQUIRE(summary.allreduce_share == Approx(0.375));
}
