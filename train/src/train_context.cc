// TrainContext: accessors over the worker's session; the session table.
#include "lumen/train/train_context.h"
#include "worker_session.h"

namespace lumen::train {

WorkerSession& TrainContext::session() const {
  if (session_ == nullptr) throw Error("an empty TrainContext (outside a trainer's worker)");
  return *session_;
}
int TrainContext::GetWorldRank() const { return session().setup().world_rank; }
int TrainContext::GetWorldSize() const { return session().setup().world_size; }
int TrainContext::GetLocalRank() const { return session().setup().local_rank; }
int TrainContext::GetLocalWorldSize() const { return session().setup().local_world_size; }
int TrainContext::GetNodeRank() const { return session().setup().node_rank; }
const std::string& TrainContext::GetExperimentName() const {
  return session().setup().experiment_name;
}
const TrainLoopConfig& TrainContext::config() const { return session().setup().config; }
const std::string& TrainContext::GroupName() const { return session().setup().group_name; }
bool TrainContext::UseGpu() const { return session().setup().use_gpu; }
uint64_t TrainContext::BucketBytes() const { return session().setup().bucket_bytes; }
StepTimers& TrainContext::timers() const { return *session().timers(); }

DatasetShard TrainContext::GetDatasetShard(const std::string& name) const {
  const WorkerSetup& s = session().setup();
  auto it = s.datasets.find(name);
  if (it == s.datasets.end()) {
    throw std::out_of_range("TrainContext::GetDatasetShard: the trainer has no dataset \"" + name +
                            "\"");
  }
  return DatasetShard(it->second, s.world_rank, s.world_size, s.drop_last, session().timers());
}

void TrainContext::Report(const Metrics& metrics, const std::string& checkpoint_dir) {
  session().Report(metrics, checkpoint_dir);
}
std::optional<Checkpoint> TrainContext::GetCheckpoint() const {
  return session().latest_checkpoint();
}
std::string TrainContext::NewCheckpointDir() { return session().NewCheckpointDir(); }

}  // namespace lumen::train
