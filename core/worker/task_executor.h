// The executor of a worker process: runs each task the TaskReceiver queued on
// an executor thread (fetches its stored arguments, calls the registered
// function, actor factory or method, stores a large result in the node's
// store) and reports its completion to the owner with a taskReply frame.
//
//   TaskExecutor executor(host, receiver, options);
//   executor.Run();              // worker main thread: until host.ShouldStop()
//   executor.Execute(task);      // or one task, on the calling thread (tests)
//
// What it needs from the runtime (the store, the argument pulls, the reply
// channel) it asks of a TaskExecutorHost, which CoreWorker implements and a
// test fakes. Threads: Run and Execute on executor threads (one, or
// max_concurrency for a concurrent actor, started by the creation task); the
// actor instance is set by the creation task before any call runs (the
// receiver hands calls out only after it), so it needs no lock. Internal to
// core/worker.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/worker/held_replies.h"
#include "core/worker/running_tasks.h"
#include "core/worker/task_receiver.h"
#include "lumen/actors/actor_call.h"
#include "lumen/common/ids.h"
#include "lumen/internal/runtime.h"

namespace lumen::runtime {

// What the executor needs from the runtime. Called on executor threads; each
// method may block that thread (never the io thread).
class TaskExecutorHost {
 public:
  virtual ~TaskExecutorHost() = default;
  // True once the executor threads should end (the node daemon is gone, or
  // the runtime stops). Any thread; cheap (polled while spinning). Whoever
  // makes it true also calls the receiver's Stop, so that a thread blocked in
  // TaskReceiver::Take (untimed) returns and sees it.
  virtual bool ShouldStop() = 0;
  // Pins the stored argument `arg` in this node's store (first copying it from
  // the node that has it when it is not here) and returns its bytes, pinned
  // while the returned keepalive is held.
  virtual absl::StatusOr<internal::ObjectBytes> FetchArgument(const TaskToRun::Arg& arg) = 0;
  // Creates an unsealed buffer of `size` bytes for `id` in the node's store
  // and returns where to write it. AlreadyExists: an earlier attempt created
  // it; ResourceExhausted: the store is full.
  virtual absl::StatusOr<uint8_t*> CreateInStore(const ObjectId& id, uint64_t size) = 0;
  // Seals what CreateInStore made, once written.
  virtual absl::Status SealInStore(const ObjectId& id, uint64_t size) = 0;
  // OK when a sealed copy of `id` is in the node's store (it is not pinned).
  virtual absl::Status CheckSealed(const ObjectId& id) = 0;
  // Sends task reply frames to their owner over `reply_to` (gone: dropped).
  // Copied before it returns: the executor reuses its buffers.
  virtual void SendReply(const std::weak_ptr<Connection>& reply_to, std::string_view frames) = 0;
  // Sends an exiting actor's last reply, tells its owner it exits on purpose,
  // and ends the process once the reply is out. In a real worker this never
  // returns to the executor thread.
  virtual void SendLastReplyAndExit(const std::weak_ptr<Connection>& reply_to,
                                    std::string frame) = 0;
  // Calls `fn` once, `delay` from now, on a thread other than the executor's
  // (the worker's io thread); never, once the runtime stops. The bound on
  // held replies (held_replies.h).
  virtual void RunAfter(std::chrono::microseconds delay, std::function<void()> fn) = 0;
  // A task of `kind` named `function` is about to run on this executor
  // thread (the worker marks its output with it for log forwarding).
  virtual void TaskStarting(proto::TaskKind /*kind*/, const std::string& /*function*/) {}
};

class TaskExecutor {
 public:
  struct Options {
    NodeId node_id;
    std::string node_address;  // put into the reply of a stored result
    WorkerId worker_id;
    std::string exe_path;      // named in failures
    uint64_t inline_limit = 0;  // results above this many bytes go to the store
    // A function whose tasks took less than this on average on a thread is
    // short there: its replies may be held back (held_replies.h).
    double short_task_micros = TaskDurations::kShortMicros;
    // The most replies one write carries (held_replies.h; 0: none held).
    int hold_replies = HeldReplies::MaxFrames();
    // How long a reply may be held at most (held_replies.h).
    std::chrono::microseconds max_hold{HeldReplies::MaxHoldMicros()};
    // Looks a function up by name (nullptr: not registered).
    std::function<const internal::RemoteFunction*(std::string_view)> find_function =
        internal::FindRemoteFunction;
  };

  // `host` and `receiver` outlive the executor.
  TaskExecutor(TaskExecutorHost& host, TaskReceiver& receiver, Options options);
  ~TaskExecutor();
  TaskExecutor(const TaskExecutor&) = delete;
  TaskExecutor& operator=(const TaskExecutor&) = delete;

  // Runs received tasks on the calling thread (and, for a concurrent actor,
  // on the threads its creation starts) until host.ShouldStop(); then joins
  // those threads.
  void Run();
  // Runs one task on the calling thread and sends its reply (at once; only
  // Run's threads hold replies back, see held_replies.h).
  void Execute(TaskToRun& task);

  // Sends the replies the calling executor thread holds back (none on other
  // threads): the running task is about to block (in Get), and the owner may
  // need those results first.
  void FlushHeldReplies();
  // Sends what any executor thread has held for max_hold or longer; calls
  // itself again (host.RunAfter) while replies are held. The host's timer
  // thread; armed by the first hold of a batch.
  void FlushOverdueReplies();

  // The actor call running on this thread asked to exit after it returns.
  // FailedPrecondition outside an actor method.
  [[nodiscard]] absl::Status ExitAfterCurrentCall();

  // Whether the calling thread runs a task now (a Get there blocks a worker).
  static bool InTask();
  // The GPU ids of the task the calling thread runs (none outside tasks).
  static std::vector<int> CurrentGpuIds();

  // A thread spins for its next task when its queue runs dry after a task: in
  // a synchronous round trip the owner sends the next task once it has this
  // one's reply, within microseconds. A task found queued behind another
  // means a pipeline feeds the thread instead; when that queue runs dry the
  // next task comes when its owner has made more, and a spin for it takes the
  // CPU from the very threads making it (on 2 cores, without it
  // single_client_wait_1k_refs 1.31 and single_client_tasks_async 1.15:
  // doc/benchmark.md, "Stop 38"). So after a backlog, the next this many
  // times the queue runs dry the thread blocks at once.
  static constexpr int kSpinlessTasksAfterBacklog = 32;
  // How often this executor's threads spun for a next task. Any thread.
  uint64_t Spins() const { return spins_.load(std::memory_order_relaxed); }

  // Records STARTED for each task running now that no earlier call recorded
  // (its reply then carries no events: the worker records its end): the
  // worker's flusher, before each drain (running_tasks.h). Any thread.
  size_t RecordRunningTasks() { return running_.RecordStarted(TaskEvents()); }

 private:
  // Executor thread: spins briefly, then takes tasks until ShouldStop.
  void Loop();
  // Sends `frame` for `to` with whatever this thread holds (one write when
  // both go to the same connection).
  void SendWithHeld(const std::weak_ptr<Connection>& to, std::string_view frame);
  // Holds `frame` in `batch` (false: not held, send it) and arms the timer
  // that bounds the hold.
  bool Hold(HeldBatch& batch, const std::weak_ptr<Connection>& to, std::string_view frame);
  // Sends what `batch` holds. Its replies leave under its lock, so that the
  // executor thread's next reply cannot pass them.
  void SendHeldLocked(HeldBatch& batch) ABSL_EXCLUSIVE_LOCKS_REQUIRED(batch.mu);
  // Calls the task's function; its encoded result, or why it failed.
  void Invoke(TaskToRun& task, std::string* result,
              std::optional<actors::TaskFailure>* failure);
  // Puts a result over the inline limit into the store; nullopt when stored.
  std::optional<actors::TaskFailure> StoreResult(const ObjectId& id, const std::string& result,
                                                 const TaskToRun& task);
  // Where `task` ran, for its failure: "task F, pid P on node N, binary B". Made
  // only when a task fails (one string per task otherwise).
  std::string Location(const TaskToRun& task) const;
  // CUDA_VISIBLE_DEVICES and CurrentGpuIds for the task on this thread.
  static void UseGpus(const std::vector<int>& ids);

  TaskExecutorHost& host_;
  TaskReceiver& receiver_;
  const Options options_;
  // ", pid P on node N, binary B": where a failure happened, made once (not a
  // getpid per task: issue 13's syscall count).
  const std::string where_;
  // Set by the creation task, before the receiver hands out any call.
  std::shared_ptr<void> actor_instance_;
  std::vector<int> actor_gpu_ids_;
  // A concurrent actor's further executor threads (started by its creation).
  absl::Mutex threads_mu_;
  std::vector<std::thread> threads_ ABSL_GUARDED_BY(threads_mu_);
  // The held replies of each thread in Loop, for FlushOverdueReplies; locked
  // before a batch's mu.
  absl::Mutex batches_mu_;
  std::vector<HeldBatch*> batches_ ABSL_GUARDED_BY(batches_mu_);
  // Whether FlushOverdueReplies is due to run (armed, not yet disarmed).
  std::atomic<bool> watching_{false};
  std::atomic<uint64_t> spins_{0};
  // The task each executor thread runs, for the flusher (RecordRunningTasks).
  RunningTasks running_;
  const int32_t pid_;  // this worker's, sent in each reply with its events
};

}  // namespace lumen::runtime
