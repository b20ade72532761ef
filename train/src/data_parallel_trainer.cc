// DataParallelTrainer::Fit: the driver's supervision loop. Per attempt: reserve
// and start a worker group, take rank 0's reports as they come (history,
// metrics.csv, checkpoint pruning), and watch the workers' Run calls; a
// failure tears the group down and starts a new one from the latest
// checkpoint, up to max_failures. Runs on the caller's thread.
#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <iostream>
#include <random>
#include <sstream>

#include "absl/status/statusor.h"
#include "checkpoint_manager.h"
#include "lumen/train/trainer.h"
#include "report_channel.h"
#include "run_log.h"
#include "worker_group.h"

namespace lumen::train {
namespace {

std::string RandomId() {
  std::random_device device;
  std::ostringstream out;
  out << std::hex << device() << device();
  return out.str();
}

// The run's persistent state on the driver, across attempts.
struct RunState {
  internal::CheckpointManager checkpoints;
  internal::RunLog log;
  int64_t next_index = 0;
};

void DeleteCheckpoints(const std::vector<Checkpoint>& dropped) {
  for (const Checkpoint& c : dropped) {
    std::error_code ec;
    std::filesystem::remove_all(c.path, ec);
    if (ec) std::cerr << "lumen.train: cannot remove " << c.path << ": " << ec.message() << "\n";
  }
}

// Takes every report of this attempt that arrived, in order.
void DrainReports(const std::string& attempt_id, RunState& state) {
  const std::string ns = internal::kReportNamespace;
  for (const std::string& key : kv::Keys(internal::ReportPrefix(attempt_id), ns)) {
    std::optional<std::string> value = kv::Get(key, ns);
    kv::Delete(key, ns);
    if (!value) continue;
    auto record = codec::DecodeValue<internal::ReportRecord>(*value);
    if (!record.ok()) {
      std::cerr << "lumen.train: a corrupt report " << key << ": " << record.status() << "\n";
      continue;
    }
    state.next_index = record->index + 1;
    state.log.Add(record->metrics);
    if (record->checkpoint) DeleteCheckpoints(state.checkpoints.Add(*record->checkpoint));
  }
}

// Whether the free resources (summed over the nodes) hold `count` more bundles.
bool RoomFor(const std::map<std::string, double>& bundle, int count) {
  std::map<std::string, double> free = AvailableResources();
  for (const auto& [name, quantity] : bundle) {
    if (free[name] < quantity * count) return false;
  }
  return true;
}

// How one attempt ended.
struct Outcome {
  enum Kind { kDone, kFailed, kGrow } kind = kDone;
  std::string error;  // kFailed
};

// Watches one attempt until every worker's Run returned, one failed, or (an
// elastic group below its size, with a checkpoint reported by this attempt)
// the cluster has room for the missing workers.
Outcome Supervise(internal::WorkerGroup& group, const std::string& attempt_id,
                  const ScalingConfig& scaling, const RunConfig& run, RunState& state) {
  const auto& runs = group.runs();
  const int64_t first_index = state.next_index;
  auto next_room_check = std::chrono::steady_clock::now() + scaling.elastic_check_period;
  while (true) {
    DrainReports(attempt_id, state);
    auto ready = lumen::Wait(runs, runs.size(), run.poll_period);
    for (const auto& ref : ready.ready) {
      try {
        lumen::Get(ref);
      } catch (const Error& e) {
        return {Outcome::kFailed, e.what()};
      }
    }
    if (ready.unready.empty()) {
      DrainReports(attempt_id, state);  // rank 0 put its last report before returning
      return {Outcome::kDone, ""};
    }
    if (scaling.Elastic() && group.size() < scaling.num_workers &&
        std::chrono::steady_clock::now() >= next_room_check) {
      next_room_check = std::chrono::steady_clock::now() + scaling.elastic_check_period;
      const auto& latest = state.checkpoints.latest();
      if (latest && latest->index >= first_index &&
          RoomFor(scaling.WorkerResources(), scaling.num_workers - group.size())) {
        return {Outcome::kGrow, ""};
      }
    }
  }
}

// Reserves the largest group that can be placed: num_workers, or (elastic)
// down to min_workers, each size above the minimum waiting
// elastic_placement_timeout. The smallest size's error when none can.
absl::StatusOr<std::unique_ptr<internal::WorkerGroup>> Place(const ScalingConfig& scaling,
                                                             const std::string& name) {
  const int smallest = scaling.Elastic() ? scaling.min_workers : scaling.num_workers;
  for (int size = scaling.num_workers;; --size) {
    ScalingConfig sized = scaling;
    sized.num_workers = size;
    if (size > smallest) sized.placement_timeout = scaling.elastic_placement_timeout;
    auto group = std::make_unique<internal::WorkerGroup>(sized);
    absl::Status reserved = group->Reserve(name + ".w" + std::to_string(size));
    if (reserved.ok()) return group;
    if (size <= smallest) return reserved;
  }
}

}  // namespace

DataParallelTrainer::DataParallelTrainer(TrainLoop loop, TrainLoopConfig config,
                                         ScalingConfig scaling, RunConfig run,
                                         std::map<std::string, Dataset> datasets)
    : loop_name_(internal::TrainLoopName(loop)),
      config_(std::move(config)),
      scaling_(std::move(scaling)),
      run_(std::move(run)),
      datasets_(std::move(datasets)) {
  if (loop_name_.empty()) {
    throw Error("DataParallelTrainer: the train loop is not registered; add LUMEN_TRAIN_LOOP(loop) at namespace scope");
  }
  if (scaling_.num_workers < 1) throw Error("DataParallelTrainer: num_workers must be >= 1");
}

Result DataParallelTrainer::Fit() {
  namespace fs = std::filesystem;
  Result result;
  const std::string run_dir = (fs::path(run_.storage_path) / run_.name).string();
  fs::create_directories(run_dir);
  result.path = run_dir;
  auto epochs = config_.find("epochs");
  RunState state{internal::CheckpointManager(run_.checkpoint),
                 internal::RunLog(run_dir, run_.verbose,
                                  epochs == config_.end() ? 0 : static_cast<int>(epochs->second)),
                 0};
  if (run_.resume_from_storage) {
    for (const Checkpoint& c : internal::CheckpointManager::Scan(run_dir)) {
      DeleteCheckpoints(state.checkpoints.Add(c));
      state.next_index = c.index + 1;
    }
  }
  const std::string run_id = RandomId();
  for (int attempt = 0;; ++attempt) {
    const std::string attempt_id = run_id + "." + std::to_string(attempt);
    absl::StatusOr<std::unique_ptr<internal::WorkerGroup>> placed =
        Place(scaling_, "lumen.train." + run_.name + "." + attempt_id);
    if (!placed.ok()) {
      result.error = "DataParallelTrainer: " + std::string(placed.status().message());
      break;
    }
    std::unique_ptr<internal::WorkerGroup> group = *std::move(placed);
    WorkerSetup base{.run_id = attempt_id,
                     .experiment_name = run_.name,
                     .run_dir = run_dir,
                     .group_name = "lumen.train." + attempt_id,
                     .use_gpu = scaling_.use_gpu,
                     .collective_timeout_ms = scaling_.collective_timeout.count(),
                     .bucket_bytes = scaling_.bucket_bytes,
                     .config = config_,
                     .datasets = datasets_,
                     .checkpoint = state.checkpoints.latest(),
                     .next_report_index = state.next_index,
                     .drop_last = drop_last_};
    group->Start(base, loop_name_);
    Outcome outcome = Supervise(*group, attempt_id, scaling_, run_, state);
    group->Shutdown();
    if (outcome.kind == Outcome::kDone) break;
    DrainReports(attempt_id, state);  // what rank 0 put just before the group went
    const auto& latest = state.checkpoints.latest();
    const std::string from = latest ? latest->path : std::string("scratch");
    if (outcome.kind == Outcome::kGrow) {
      if (run_.verbose) {
        std::cout << "lumen.train: room for " << scaling_.num_workers << " workers again ("
                  << group->size() << " now); restarting from " << from << std::endl;
      }
      continue;  // not a failure
    }
    result.num_failures++;
    const int max = run_.failure.max_failures;
    if (max >= 0 && result.num_failures > max) {
      result.error = "DataParallelTrainer: the worker group failed " +
                     std::to_string(result.num_failures) + " time(s) (max_failures " +
                     std::to_string(max) + "); last error: " + outcome.error;
      break;
    }
    if (run_.verbose) {
      std::cout << "lumen.train: worker group failed (" << outcome.error << "); restarting from "
                << from << " (failure " << result.num_failures << " of "
                << (max < 0 ? std::string("unlimited") : std::to_string(max)) << ")" << std::endl;
    }
  }
  try {
    kv::DeletePrefix(run_id, internal::kReportNamespace);
  } catch (const Error& e) {
    std::cerr << "lumen.train: cannot remove the run's report keys: " << e.what() << "\n";
  }
  result.history = state.log.history();
  if (!result.history.empty()) result.metrics = result.history.back();
  result.checkpoint = state.checkpoints.latest();
  result.best_checkpoints = state.checkpoints.Kept();
  result.time = state.log.Summary();
  return result;
}

}  // namespace lumen::train
