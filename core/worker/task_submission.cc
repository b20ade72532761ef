// CoreWorker: task submission (any thread: SubmitTask, Enqueue), the hand-off
// of resolved tasks to the actor submitter or the NormalTaskSubmitter, task
// specs as they go on the wire, and the NormalTaskSubmitter's transport over
// this runtime's connections. io thread unless noted.
#include "lumen/worker/core_worker.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <typeinfo>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "core/worker/dependency_resolver.h"
#include "core/worker/normal_task_submitter.h"
#include "core/worker/pending_task_pool.h"
#include "core/worker/submission_queue.h"
#include "core/worker/task_manager.h"
#include "core/worker/worker_state.h"
#include "lumen/common/codec.h"
#include "lumen/common/head_client.h"
#include "lumen/common/logging.h"
#include "lumen/common/process.h"
#include "lumen/common/proto_util.h"
#include "lumen/common/task_events.h"
#include "lumen/objectstore/fd_passing.h"
#include "lumen/objectstore/object_table.h"
#include "lumen/worker/api_error.h"

namespace lumen::runtime {

// ---------------------------------------------------------------------------
// Task submission (owner side)

std::shared_ptr<internal::RefHandle> CoreWorker::SubmitTask(
    std::string_view function, std::vector<internal::TaskArgument> args,
    const internal::TaskOptions& options) {
  if (node_lost_) ThrowError(ErrorKind::kError, "lumen: lost the connection to the node daemon");
  std::unique_ptr<PendingTask> task = task_pool_->Take();
  task->task_id = TaskId::Random();
  task->return_id = ObjectId::ForTaskReturn(task->task_id, 1);
  task->function = std::string(function);
  task->display_name = options.name;
  task->args = std::move(args);
  task->placement = std::make_unique<TaskPlacement>();
  TaskPlacement& placement = *task->placement;
  // Most tasks ask for nothing: {CPU: 1} is left implicit (an empty map, no
  // allocation per task); the submitter fills it in for a new queue.
  static const std::string kDefaultShapeKey = ResourceShapeKey(DefaultTaskResources());
  placement.resources = options.resources;
  placement.scheduling = options.scheduling;
  task->max_retries = task->retries_left = std::max(-1, options.max_retries);
  task->retry_exceptions = options.retry_exceptions;
  // Retriable and non-retriable tasks lease apart: the node's memory monitor
  // tells their workers apart by the lease.
  placement.queue_key = (placement.resources.empty() ? kDefaultShapeKey
                                                     : ResourceShapeKey(placement.resources)) +
                        SchedulingKey(placement.scheduling) +
                        (task->max_retries != 0 ? "" : "/no-retry");
  auto handle = std::make_shared<internal::RefHandle>(task->return_id, shared_listen_address_);
  Enqueue(std::move(task));
  return handle;
}

void CoreWorker::MoveLargeArgumentsToStore(std::vector<internal::TaskArgument>& args) {
  for (auto& arg : args) {
    if (!arg.ref && arg.value.size() > options_.inline_limit) {
      arg.ref = PutEncoded(std::move(arg.value));
      arg.value.clear();
    }
  }
}

void CoreWorker::Enqueue(std::unique_ptr<PendingTask> task) {
  // SUBMITTED's time; recorded on the io thread (DrainSubmissions), where the
  // task ends, so that FINISHED can take over its record (task_events.h).
  task->submitted_tick = TaskEvents().Tick();
  // Large values travel through the store, not inside the task's frame.
  MoveLargeArgumentsToStore(task->args);
  // One wake-up of the io thread per burst of submissions.
  if (submissions_->Push(std::move(task))) PostDrainSubmissions();
}

void CoreWorker::PostDrainSubmissions() {
  if (PostToIo("worker.drain_submissions", [this] { DrainSubmissions(); })) return;
  // Stopping: nothing will run it; the results fail instead of hanging.
  for (auto& t : submissions_->TakeAll()) {
    memory_store_->SetFailed(t->return_id, Failure{proto::FailureKind::OTHER, "",
                                                   "the runtime is shutting down", ""});
  }
}

void CoreWorker::DrainSubmissions() {
  io_checker_.Check("CoreWorker::DrainSubmissions");
  bool more = false;
  std::vector<std::unique_ptr<PendingTask>> batch = submissions_->TakeChunk(&more);
  // The rest waits behind what is queued on the io loop now (task replies,
  // pushes), so a burst of submissions never holds the loop for long.
  if (more) PostDrainSubmissions();
  for (auto& task : batch) {
    if (task->submitted_tick != 0) {
      TaskEvents().Record(TaskEventKind::kSubmitted, task->task_id, task->attempt,
                          task->kind == proto::TaskKind::NORMAL ? task->name() : task->function,
                          {.actor_call = task->kind != proto::TaskKind::NORMAL,
                           .at_tick = task->submitted_tick,
                           .start = &task->submitted_mark});
    }
    if (task->kind == proto::TaskKind::ACTOR_CREATION) {
      actor_owner_->Add(std::move(task->actor_record));
    }
    if (task->kind == proto::TaskKind::ACTOR_METHOD) {
      // The actor submitter owns it from now on, in submission order.
      PendingTask* raw = task.get();
      ObjectId actor = raw->actor->id();
      std::string owner = raw->actor->owner_address();
      actor_submitter_->Submit(actor, owner, std::move(task));
      resolver_->Resolve(raw);
      continue;
    }
    // Owned by the resolver's callbacks until its arguments are ready.
    resolver_->Resolve(task.release());
  }
}

void CoreWorker::OnTaskResolved(PendingTask* raw) {
  raw->dependencies_ready_tick = TaskEvents().Tick();  // folded into FINISHED/FAILED
  if (raw->kind == proto::TaskKind::ACTOR_METHOD) {
    // Owned by the actor submitter; it goes out in submission order.
    if (auto failed = resolver_->FailedArgument(*raw)) {
      raw->dep_failure = std::make_unique<Failure>(*std::move(failed));
    }
    raw->resolved = true;
    actor_submitter_->OnCallResolved(raw->actor->id());
    return;
  }
  std::unique_ptr<PendingTask> task(raw);
  if (task->kind == proto::TaskKind::ACTOR_CREATION) {
    actor_owner_->Start(task->return_id);
    return;
  }
  if (!cancelled_unresolved_.empty() && cancelled_unresolved_.erase(task->task_id) > 0) {
    tasks_->Cancel(*task, " before it started");
    return;  // `task` goes: its argument refs are released
  }
  // A failed argument fails the task with the same error (as in Ray).
  if (auto failed_argument = resolver_->FailedArgument(*task)) {
    tasks_->Fail(std::move(task), *std::move(failed_argument));
    return;
  }
  submitter_->Submit(std::move(task));
}

void CoreWorker::FillTaskSpec(proto::TaskSpec::Builder spec, const PendingTask& task) {
  spec.setTaskId(DataOf(task.task_id));
  spec.setFunction(task.function);
  spec.setAttempt(task.attempt);
  spec.setOwnerAddress(listen_address_);
  spec.setKind(task.kind);
  if (task.actor) spec.setActorId(DataOf(task.actor->id()));
  auto args = spec.initArgs(task.args.size());
  const bool any_ref = std::any_of(task.args.begin(), task.args.end(),
                                   [](const internal::TaskArgument& a) { return a.ref != nullptr; });
  if (!any_ref) {
    // Inline values only (most small tasks): no table lookup, so no lock.
    for (size_t i = 0; i < task.args.size(); ++i) args[i].setInline(BytesOf(task.args[i].value));
    return;
  }
  ObjectTable::Locked objects(*object_table_);
  for (size_t i = 0; i < task.args.size(); ++i) {
    const auto& arg = task.args[i];
    if (!arg.ref) {
      args[i].setInline(BytesOf(arg.value));
      continue;
    }
    auto it = objects->find(arg.ref->id());
    if (it == objects->end()) {
      // Cannot happen while `arg.ref` holds it; fail the argument rather than crash.
      FailureToProto(Failure{proto::FailureKind::OBJECT_LOST, "lumen::ObjectLostError",
                             absl::StrCat("argument object ", arg.ref->id().Hex(),
                                          " is not in the reference table"),
                             ""},
                     args[i].initError());
      continue;
    }
    FillValue(args[i], it->second, listen_address_);
    if (it->second.kind == ObjectEntry::Kind::kStored) {
      args[i].getStored().setObjectId(DataOf(arg.ref->id()));
    }
  }
}

// ---------------------------------------------------------------------------
// The NormalTaskSubmitter's transport

class CoreWorker::SubmitterTransport::Worker final : public LeasedWorker {
 public:
  Worker(CoreWorker& core, std::shared_ptr<Connection> conn)
      : core_(core), conn_(std::move(conn)) {}
  // The submitter may drop a lease from inside its connection's close callback.
  ~Worker() override { core_.ReleaseLater(std::move(conn_)); }
  void Push(const PendingTask& task, const std::vector<int>& gpu_ids) override {
    OutMessage out;
    auto spec = out.Init().initPushTask();
    core_.FillTaskSpec(spec, task);
    SetGpuIds(spec, gpu_ids);
    conn_->Send(out.builder());
  }
  void Close(const absl::Status& why) override { conn_->Close(why); }

 private:
  CoreWorker& core_;
  std::shared_ptr<Connection> conn_;
};

class CoreWorker::SubmitterTransport::Timer final : public OneShotTimer {
 public:
  explicit Timer(CoreWorker& core) : core_(core), timer_(core.io_) {}
  void Arm(std::chrono::milliseconds delay, std::function<void()> fn) override {
    timer_.expires_after(delay);  // a pending wait ends with operation_aborted
    timer_.async_wait([&core = core_, fn = std::move(fn)](const boost::system::error_code& ec) {
      if (ec || core.stopped_) return;
      fn();
    });
  }
  void Cancel() override { timer_.cancel(); }

 private:
  CoreWorker& core_;
  boost::asio::steady_timer timer_;
};

std::unique_ptr<OneShotTimer> CoreWorker::SubmitterTransport::NewTimer() {
  return std::make_unique<Timer>(core_);
}

void CoreWorker::SubmitterTransport::ConnectWorker(const std::string& address,
                                                   WorkerHandlers handlers, ConnectDone done) {
  CoreWorker& core = core_;
  AsyncConnectToAddress(
      core.io_, address, core.options_.session_dir, core.options_.timeouts.connect_timeout,
      [&core, handlers = std::move(handlers),
       done = std::move(done)](absl::StatusOr<Socket> socket) mutable {
        if (core.stopped_) return;
        if (!socket.ok()) {
          done(socket.status());
          return;
        }
        auto conn = Connection::Create(std::move(*socket), RuntimePeerConnectionOptions());
        conn->Start(
            [on_reply = std::move(handlers.on_reply)](Connection&, proto::Envelope::Reader msg) {
              if (msg.isTaskReply()) on_reply(msg.getTaskReply());
            },
            [&core, on_lost = std::move(handlers.on_lost)](Connection&, const absl::Status& why) {
              if (!core.stopped_) on_lost(why);
            });
        OutboundConnections::SendPeerHello(*conn);
        done(std::make_unique<Worker>(core, std::move(conn)));
      });
}

}  // namespace lumen::runtime
