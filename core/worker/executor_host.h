// The TaskExecutorHost of a worker's TaskExecutor: the node's store (through
// the node daemon), argument pulls, and replies over the owners' connections.
// Internal to core/worker.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "core/worker/task_executor.h"
#include "lumen/worker/core_worker.h"

namespace lumen::runtime {

// Runs on executor threads; what must happen on the io thread it posts there.
class CoreWorker::ExecutorHost final : public TaskExecutorHost {
 public:
  // `core` outlives the host (it owns it).
  explicit ExecutorHost(CoreWorker& core) : core_(core) {}
  bool ShouldStop() override { return core_.node_lost_ || core_.stopped_; }
  absl::StatusOr<internal::ObjectBytes> FetchArgument(const TaskToRun::Arg& arg) override;
  absl::StatusOr<uint8_t*> CreateInStore(const ObjectId& id, uint64_t size) override;
  [[nodiscard]] absl::Status SealInStore(const ObjectId& id, uint64_t size) override;
  [[nodiscard]] absl::Status CheckSealed(const ObjectId& id) override;
  void SendReply(const std::weak_ptr<Connection>& reply_to, std::string_view frames) override;
  // Never returns: the io thread ends the process once the reply is out.
  void SendLastReplyAndExit(const std::weak_ptr<Connection>& reply_to,
                            std::string frame) override;
  // On the io thread, a timer (held_replies.h).
  void RunAfter(std::chrono::microseconds delay, std::function<void()> fn) override;
  // Marks the worker's output with the task (and the actor's name, which the
  // io thread set before it queued the actor's creation).
  void TaskStarting(proto::TaskKind kind, const std::string& function) override;

 private:
  CoreWorker& core_;
};

}  // namespace lumen::runtime
