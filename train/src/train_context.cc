// TrainContext: accessors over the worker's session; the session table.
#include <mutex>
#include <unordered_map>

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

namespace internal {
namespace {
struct SessionTable {
  std::mutex mu;
  uint64_t next_id = 1;                                                 // guarded by mu
  std::unordered_map<uint64_t, std::shared_ptr<WorkerSession>> live;  // guarded by mu
};
SessionTable& Table() {
  static SessionTable* table = new SessionTable;  // never destroyed: used until exit
  return *table;
}
}  // namespace

uint64_t RegisterSession(std::shared_ptr<WorkerSession> session) {
  SessionTable& t = Table();
  std::lock_guard<std::mutex> lock(t.mu);
  uint64_t id = t.next_id++;
  t.live[id] = std::move(session);
  return id;
}
void UnregisterSession(uint64_t id) {
  SessionTable& t = Table();
  std::lock_guard<std::mutex> lock(t.mu);
  t.live.erase(id);
}
std::shared_ptr<WorkerSession> FindSession(uint64_t id) {
  SessionTable& t = Table();
  std::lock_guard<std::mutex> lock(t.mu);
  auto it = t.live.find(id);
  return it == t.live.end() ? nullptr : it->second;
}
uint64_t SessionId(const TrainContext& ctx) {
  SessionTable& t = Table();
  std::lock_guard<std::mutex> lock(t.mu);
  for (const auto& [id, s] : t.live) {
    if (s.get() == &ctx.session()) return id;
  }
  throw Error("this TrainContext's worker session has ended");
}
}  // namespace internal
}  // namespace lumen::train
