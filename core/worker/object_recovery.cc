// ObjectRecovery: the lineage of stored task results, and re-running their
// tasks when every copy is lost. io thread.
#include "core/worker/object_recovery.h"

#include <cstdlib>
#include <optional>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "lumen/common/logging.h"

namespace lumen::runtime {

ObjectRecovery::Options ObjectRecovery::Options::FromEnv() {
  Options options;
  if (const char* v = std::getenv("LUMEN_MAX_LINEAGE_BYTES")) {
    uint64_t bytes = 0;
    if (absl::SimpleAtoi(v, &bytes)) {
      options.max_lineage_bytes = bytes;
    } else {
      LUMEN_LOG(WARNING) << "LUMEN_MAX_LINEAGE_BYTES=" << v << " is not a number; using "
                         << options.max_lineage_bytes;
    }
  }
  return options;
}

ObjectRecovery::ObjectRecovery(ObjectTable& table, TaskManager& tasks, Options options,
                               Callbacks callbacks)
    : table_(table), tasks_(tasks), options_(options), callbacks_(std::move(callbacks)) {}

uint64_t ObjectRecovery::EstimateBytes(const PendingTask& task) {
  // The record itself, its strings and arguments, its placement (a map node
  // per resource), and the hash-map and order slots that index it.
  uint64_t bytes = sizeof(PendingTask) + sizeof(Kept) + sizeof(ObjectId) + 64;
  bytes += task.function.capacity() + task.display_name.capacity();
  bytes += task.args.capacity() * sizeof(internal::TaskArgument);
  for (const auto& arg : task.args) bytes += arg.value.capacity();
  if (task.placement) {
    bytes += sizeof(TaskPlacement) + task.placement->queue_key.capacity() +
             task.placement->scheduling.placement_group.capacity();
    for (const auto& [name, quantity] : task.placement->resources) bytes += 64 + name.capacity();
  }
  return bytes;
}

void ObjectRecovery::KeepLineage(std::unique_ptr<PendingTask> task) {
  io_thread_.Check("ObjectRecovery::KeepLineage");
  const ObjectId id = task->return_id;
  {
    ObjectTable::Locked objects(table_);
    auto it = objects->find(id);
    // Freed already, or its value is inline (here, never lost) or an error.
    if (it == objects->end() || !it->second.owned || !it->second.ready ||
        it->second.kind != ObjectEntry::Kind::kStored) {
      return;  // `task` goes: its argument refs are released
    }
  }
  std::optional<Reason> reason;
  if (task->kind != proto::TaskKind::NORMAL) {
    reason = Reason::kActorCall;
  } else if (task->cancelled) {
    reason = Reason::kCancelled;
  } else if (task->max_retries == 0) {
    reason = Reason::kNoRetries;
  } else if (task->retries_left == 0) {
    reason = Reason::kRetriesSpent;
  } else if (!task->placement) {
    reason = Reason::kEvicted;  // cannot be queued again: treat as released lineage
  }
  if (reason) {
    notes_[id] = *reason;
    return;
  }
  notes_.erase(id);
  const uint64_t bytes = EstimateBytes(*task);
  const uint64_t seq = next_seq_++;
  auto [it, inserted] = kept_.try_emplace(id);
  if (!inserted) kept_bytes_ -= it->second.bytes;  // cannot happen: one task per return id
  it->second = Kept{std::move(task), bytes, seq};
  kept_bytes_ += bytes;
  order_.emplace_back(id, seq);
  EvictOverCap();
}

void ObjectRecovery::EvictOverCap() {
  while (kept_bytes_ > options_.max_lineage_bytes && !order_.empty()) {
    auto [id, seq] = order_.front();
    order_.pop_front();
    auto it = kept_.find(id);
    if (it == kept_.end() || it->second.seq != seq) continue;  // stale
    kept_bytes_ -= it->second.bytes;
    std::unique_ptr<PendingTask> released = std::move(it->second.task);
    kept_.erase(it);
    notes_[id] = Reason::kEvicted;
    // `released` goes here: its argument refs are released (and may free
    // objects, whose Forget is posted: nothing re-enters this loop).
  }
  MaybeCompactOrder();
}

void ObjectRecovery::MaybeCompactOrder() {
  if (order_.size() <= 2 * kept_.size() + 1024) return;
  std::deque<std::pair<ObjectId, uint64_t>> live;
  for (const auto& [id, seq] : order_) {
    auto it = kept_.find(id);
    if (it != kept_.end() && it->second.seq == seq) live.emplace_back(id, seq);
  }
  order_.swap(live);
}

void ObjectRecovery::Forget(const ObjectId& id) {
  io_thread_.Check("ObjectRecovery::Forget");
  if (!notes_.empty()) notes_.erase(id);
  auto it = kept_.find(id);
  if (it == kept_.end()) return;
  kept_bytes_ -= it->second.bytes;
  std::unique_ptr<PendingTask> released = std::move(it->second.task);
  kept_.erase(it);
  MaybeCompactOrder();
  // `released` goes last: its argument refs are released.
}

std::string ObjectRecovery::ReasonText(const ObjectId& id) const {
  auto it = notes_.find(id);
  if (it == notes_.end()) {
    return "it was made by Put (only task results are rebuilt from lineage)";
  }
  switch (it->second) {
    case Reason::kActorCall:
      return "it is the result of an actor call (actor calls are not re-run)";
    case Reason::kNoRetries:
      return "its task has max_retries=0";
    case Reason::kRetriesSpent:
      return "its task has used up its retries (max_retries)";
    case Reason::kCancelled:
      return "its task was cancelled";
    case Reason::kPinnedToDeadNode:
      return "its task must run on that node (NodeAffinity, soft=false)";
    case Reason::kEvicted:
      return absl::StrCat("its lineage was released to keep the owner's lineage under ",
                          options_.max_lineage_bytes, " bytes (LUMEN_MAX_LINEAGE_BYTES)");
  }
  return "no lineage is kept for it";
}

size_t ObjectRecovery::OnLost(const std::vector<ObjectId>& lost, const std::string& why,
                              const NodeId& dead_node) {
  io_thread_.Check("ObjectRecovery::OnLost");
  std::vector<std::unique_ptr<PendingTask>> rerun;
  std::vector<std::pair<ObjectId, Failure>> failed;
  for (const ObjectId& id : lost) {
    std::unique_ptr<PendingTask> task;
    auto it = kept_.find(id);
    if (it != kept_.end()) {
      kept_bytes_ -= it->second.bytes;
      task = std::move(it->second.task);
      kept_.erase(it);
    }
    // A task that may only run on the node that died cannot run again.
    const bool pinned_there =
        task && !dead_node.IsNil() && task->placement &&
        task->placement->scheduling.kind == internal::SchedulingOptions::Kind::kNodeAffinity &&
        !task->placement->scheduling.soft && task->placement->scheduling.node == dead_node;
    if (task && !pinned_there && tasks_.ConsumeRetry(*task)) {
      rerun.push_back(std::move(task));
      continue;
    }
    if (task) notes_[id] = pinned_there ? Reason::kPinnedToDeadNode : Reason::kRetriesSpent;
    failed.emplace_back(id, Failure{proto::FailureKind::OBJECT_LOST, "lumen::ObjectLostError",
                                    absl::StrCat("object ", id.Hex(), ": ", why,
                                                 "; it cannot be rebuilt: ", ReasonText(id)),
                                    ""});
    notes_.erase(id);  // the reason is in the failure now
    // `task` (spent) goes here: its argument refs are released.
  }
  MaybeCompactOrder();
  std::vector<std::unique_ptr<PendingTask>> dropped;  // destroyed after the lock
  {
    // First every lost object changes state, then tasks go out: a task whose
    // argument is lost too then finds it pending (being rebuilt), not failed.
    ObjectTable::Locked objects(table_);
    for (auto& [id, failure] : failed) {
      auto it = objects->find(id);
      if (it != objects->end()) it->second.SetFailed(std::move(failure));
    }
    for (auto& task : rerun) {
      auto it = objects->find(task->return_id);
      if (it == objects->end()) {
        dropped.push_back(std::move(task));  // freed meanwhile: nothing to rebuild
        continue;
      }
      ObjectEntry& e = it->second;
      // Pending again; the rerun's reply fills it (MemoryStore::SetReady).
      e.ready.store(false, std::memory_order_release);
      e.kind = ObjectEntry::Kind::kStored;
      e.locations.clear();
      e.failure.reset();
    }
  }
  std::erase(rerun, nullptr);
  dropped.clear();
  for (auto& task : rerun) {
    LUMEN_LOG(INFO) << "rebuilding object " << task->return_id.Hex().substr(0, 12)
                    << " from lineage: running " << task->name() << " again (attempt "
                    << task->attempt + 1 << ")";
    callbacks_.resubmit(std::move(task));
  }
  return rerun.size();
}

void ObjectRecovery::Clear() {
  kept_.clear();
  order_.clear();
  notes_.clear();
  kept_bytes_ = 0;
}

}  // namespace lumen::runtime
