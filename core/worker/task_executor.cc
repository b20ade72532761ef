// TaskExecutor: runs received tasks on executor threads (task_executor.h).
#include "core/worker/task_executor.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "core/worker/worker_state.h"
#include "lumen/common/codec.h"
#include "lumen/common/connection.h"
#include "lumen/common/error_kind.h"
#include "lumen/common/proto_util.h"
#include "lumen/common/task_events.h"
#include "lumen/worker/api_error.h"

namespace lumen::runtime {
namespace {

// Set on an executor thread while it runs a task: a Get there gives the CPU back.
thread_local bool in_task = false;

// The task events of a task that ran `span_us` from `start_us` (the system
// clock), split into its phases by the event clock's ticks: the start, the
// arguments fetched (0: not reached), executed, and the end.
TaskExecution ExecutionOf(int64_t start_us, uint64_t span_us, uint64_t start_tick,
                          uint64_t fetched_tick, uint64_t executed_tick, uint64_t end_tick) {
  const uint64_t ticks = end_tick - start_tick;
  // Microseconds from the start to `tick`, clamped into the span.
  auto at = [&](uint64_t tick) -> uint64_t {
    if (ticks == 0 || end_tick < start_tick || tick <= start_tick) return 0;
    if (tick >= end_tick) return span_us;
    return static_cast<uint64_t>(
        static_cast<double>(span_us) *
        (static_cast<double>(tick - start_tick) / static_cast<double>(ticks)));
  };
  const uint64_t fetched = at(fetched_tick == 0 ? start_tick : fetched_tick);
  const uint64_t executed = std::max(fetched, at(executed_tick));
  auto micros = [](uint64_t us) {
    return static_cast<uint32_t>(std::min<uint64_t>(us, UINT32_MAX));
  };
  return {.started_us = start_us,
          .args_fetch_us = micros(fetched),
          .run_us = micros(executed - fetched),
          .store_us = micros(span_us - executed)};
}

void SetExecution(proto::TaskReply::Builder reply, const TaskExecution& x) {
  reply.setStartedMicros(x.started_us);
  reply.setArgsFetchMicros(x.args_fetch_us);
  reply.setRunMicros(x.run_us);
  reply.setStoreMicros(x.store_us);
}

// Set by ExitAfterCurrentCall on the thread running the call that asked to exit.
thread_local bool this_call_exits = false;
// The GPUs of the task this thread runs (lumen::GetGpuIds).
thread_local std::vector<int> current_gpu_ids;
// The replies this executor thread holds back (set while Loop runs on it), and
// how long its tasks took, by function (held_replies.h).
thread_local HeldBatch* held_batch = nullptr;
thread_local TaskDurations task_durations;
// A reply buffer larger than this is not kept for the next task's reply.
constexpr size_t kKeptReplyBytes = 64 << 10;

// CUDA_VISIBLE_DEVICES as this process last set it (nullopt: never). Executor
// threads of a concurrent actor set it at once: one at a time.
absl::Mutex gpu_env_mu;
std::optional<std::string> gpu_env_value ABSL_GUARDED_BY(gpu_env_mu);

// LUMEN_EXECUTOR_SPIN_US (default 100): how long an executor thread spins
// for the next task after one (0: never); LUMEN_EXECUTOR_SPIN_ADAPTIVE (default
// 1): not for the next kSpinlessTasksAfterBacklog times the queue runs dry
// after a task found another queued behind it (0: after every task). Read once.
std::pair<std::chrono::microseconds, bool> ExecutorSpin() {
  static const std::pair<std::chrono::microseconds, bool> spin = [] {
    const char* us = std::getenv("LUMEN_EXECUTOR_SPIN_US");
    const char* adaptive = std::getenv("LUMEN_EXECUTOR_SPIN_ADAPTIVE");
    return std::make_pair(std::chrono::microseconds(us != nullptr ? std::max(0, std::atoi(us)) : 100),
                          adaptive == nullptr || std::atoi(adaptive) != 0);
  }();
  return spin;
}

}  // namespace

bool TaskExecutor::InTask() { return in_task; }

std::vector<int> TaskExecutor::CurrentGpuIds() { return current_gpu_ids; }

TaskExecutor::TaskExecutor(TaskExecutorHost& host, TaskReceiver& receiver, Options options)
    : host_(host),
      receiver_(receiver),
      options_(std::move(options)),
      where_(absl::StrCat(", pid ", ::getpid(), " on node ", options_.node_id.Hex().substr(0, 12),
                          ", binary ", options_.exe_path)),
      pid_(static_cast<int32_t>(::getpid())) {
  // STARTED names them once per flush, not per task.
  TaskEvents().SetProcessIds(options_.node_id, options_.worker_id);
}

TaskExecutor::~TaskExecutor() {
  // Threads Run did not join (it was not called): they end once ShouldStop.
  std::vector<std::thread> threads;
  {
    absl::MutexLock lock(&threads_mu_);
    threads.swap(threads_);
  }
  for (auto& t : threads) t.join();
}

void TaskExecutor::Run() {
  Loop();
  std::vector<std::thread> threads;
  {
    absl::MutexLock lock(&threads_mu_);
    threads.swap(threads_);
  }
  for (auto& t : threads) t.join();
}

void TaskExecutor::Loop() {
  HeldBatch batch;
  {
    absl::MutexLock lock(&batches_mu_);
    batches_.push_back(&batch);
  }
  held_batch = &batch;
  bool busy = false;
  // How many more times this thread's queue must run dry before it spins
  // again (kSpinlessTasksAfterBacklog).
  int spinless_tasks = 0;
  while (!host_.ShouldStop()) {
    const bool idle = !receiver_.HasQueued();
    // Nothing waits: what is held goes now, before any spinning or blocking.
    if (idle) FlushHeldReplies();
    // Right after a task of a round trip, spin briefly (the next one is often
    // microseconds away); otherwise block in Take, untimed: an idle worker
    // wakes only for a task or for the receiver's Stop (the runtime stops it
    // when the node daemon is lost or the worker stops), never on a timer.
    // 10,000 idle actors' workers each waking every 200 ms kept 2 cores
    // saturated.
    const auto& [spin, adaptive] = ExecutorSpin();
    bool spins = busy && idle && spin.count() > 0;
    if (busy && adaptive) {
      if (!idle) {
        spinless_tasks = kSpinlessTasksAfterBacklog;
      } else if (spinless_tasks > 0) {
        --spinless_tasks;
        spins = false;
      }
    }
    bool spun = false;
    if (spins) {
      spins_.fetch_add(1, std::memory_order_relaxed);
      spun = SpinFor(spin, [&] { return receiver_.HasQueued() || host_.ShouldStop(); });
    }
    auto task = spun || !idle ? receiver_.TryTake() : receiver_.Take();
    busy = task != nullptr;
    if (!task) {
      FlushHeldReplies();  // another thread took it, or stopping
      continue;
    }
    // Held replies wait only behind tasks known to be short.
    if (options_.hold_replies > 0 &&
        !task_durations.KnownShort(task->function, options_.short_task_micros)) {
      FlushHeldReplies();
    }
    Execute(*task);
    receiver_.Recycle(std::move(task));  // freed, and made again, on the io thread
  }
  FlushHeldReplies();
  held_batch = nullptr;
  absl::MutexLock lock(&batches_mu_);
  batches_.erase(std::find(batches_.begin(), batches_.end(), &batch));
}

void TaskExecutor::FlushHeldReplies() {
  if (held_batch == nullptr) return;
  absl::MutexLock lock(&held_batch->mu);
  SendHeldLocked(*held_batch);
}

void TaskExecutor::SendHeldLocked(HeldBatch& batch) {
  if (batch.held.empty()) return;
  host_.SendReply(batch.held.to(), batch.held.frames());
  batch.held.Clear();
}

bool TaskExecutor::Hold(HeldBatch& batch, const std::weak_ptr<Connection>& to,
                        std::string_view frame) {
  {
    absl::MutexLock lock(&batch.mu);
    const bool first = batch.held.empty();
    if (!batch.held.TryHold(to, frame, options_.hold_replies)) return false;
    if (!first) return true;
    batch.since = std::chrono::steady_clock::now();
  }
  // The first of a batch: make sure a timer will send it if this thread does
  // not in time. While replies are held the timer re-arms itself (one run per
  // max_hold at most), so a busy worker arms it once, not per batch.
  if (!watching_.load(std::memory_order_acquire) && !watching_.exchange(true)) {
    host_.RunAfter(options_.max_hold, [this] { FlushOverdueReplies(); });
  }
  return true;
}

void TaskExecutor::FlushOverdueReplies() {
  const auto now = std::chrono::steady_clock::now();
  std::optional<std::chrono::steady_clock::time_point> next;  // the next one due
  auto scan = [&] {
    absl::MutexLock lock(&batches_mu_);
    for (HeldBatch* batch : batches_) {
      absl::MutexLock batch_lock(&batch->mu);
      if (batch->held.empty()) continue;
      const auto due = batch->since + options_.max_hold;
      if (due <= now) {
        SendHeldLocked(*batch);
      } else if (!next || due < *next) {
        next = due;
      }
    }
  };
  scan();
  if (!next) {
    // Nothing held: disarmed, and the next first hold arms again. A hold
    // made between the scan and the store saw watching_ still set and did
    // not: the second scan finds it.
    watching_.store(false);
    scan();
    if (!next || watching_.exchange(true)) return;
  }
  host_.RunAfter(std::chrono::ceil<std::chrono::microseconds>(*next - now),
                 [this] { FlushOverdueReplies(); });
}

void TaskExecutor::SendWithHeld(const std::weak_ptr<Connection>& to, std::string_view frame) {
  if (held_batch == nullptr) {
    host_.SendReply(to, frame);
    return;
  }
  // Under the batch's lock: a timer's flush of what is held cannot come after.
  absl::MutexLock lock(&held_batch->mu);
  if (held_batch->held.For(to)) {
    held_batch->held.Append(to, frame);  // one write for both
    SendHeldLocked(*held_batch);
    return;
  }
  SendHeldLocked(*held_batch);  // another owner's: in order, before this one
  host_.SendReply(to, frame);
}

void TaskExecutor::UseGpus(const std::vector<int>& ids) {
  current_gpu_ids = ids;
  // CUDA reads CUDA_VISIBLE_DEVICES when it initialises in this process: a task
  // with GPUs sees exactly its own; once set, later tasks without GPUs see none.
  std::string value;
  for (size_t i = 0; i < ids.size(); ++i) absl::StrAppend(&value, i ? "," : "", ids[i]);
  absl::MutexLock lock(&gpu_env_mu);
  if (ids.empty() && !gpu_env_value) return;
  if (gpu_env_value == value) return;  // unchanged: no setenv racing readers
  ::setenv("CUDA_VISIBLE_DEVICES", value.c_str(), 1);
  gpu_env_value = std::move(value);
}

absl::Status TaskExecutor::ExitAfterCurrentCall() {
  if (!receiver_.is_actor() || !in_task) {
    return absl::FailedPreconditionError(
        "lumen::ExitActor() must be called inside an actor method");
  }
  this_call_exits = true;
  receiver_.StopAfterCurrent();  // no further calls start
  return absl::OkStatus();
}

void TaskExecutor::Invoke(TaskToRun& task, std::string* result,
                          std::optional<Failure>* failure) {
  const internal::RemoteFunction* fn = options_.find_function(task.function);
  auto expected = task.kind == proto::TaskKind::ACTOR_CREATION
                      ? internal::RemoteFunction::Kind::kActorFactory
                  : task.kind == proto::TaskKind::ACTOR_METHOD
                      ? internal::RemoteFunction::Kind::kMethod
                      : internal::RemoteFunction::Kind::kFunction;
  if (fn != nullptr && fn->kind != expected) {
    *failure = Failure{proto::FailureKind::OTHER, "lumen::Error",
                       absl::StrCat("'", task.function,
                                    "' is registered, but not as what was called (a task, an "
                                    "actor factory or an actor method)"),
                       Location(task)};
    return;
  }
  if (task.kind == proto::TaskKind::ACTOR_METHOD && actor_instance_ == nullptr) {
    *failure = Failure{proto::FailureKind::OTHER, "lumen::Error",
                       "this worker holds no actor instance", Location(task)};
    return;
  }
  if (fn == nullptr) {
    *failure = Failure{proto::FailureKind::FUNCTION_NOT_FOUND, "lumen::FunctionNotFound",
                       absl::StrCat("function '", task.function,
                                    "' is not registered in the worker binary ",
                                    options_.exe_path,
                                    " (is it listed in LUMEN_REMOTE(...) in the binary the "
                                    "workers run?)"),
                       Location(task)};
    return;
  }
  std::vector<internal::ObjectBytes> args;
  args.reserve(task.args.size());
  for (auto& arg : task.args) {
    if (!arg.is_stored) {
      args.push_back(internal::ObjectBytes{arg.value, nullptr});
      continue;
    }
    auto got = host_.FetchArgument(arg);
    if (!got.ok()) {
      // The task fails as if it had thrown ObjectLostError (as before it runs).
      *failure = Failure{
          proto::FailureKind::OBJECT_LOST, "lumen::ObjectLostError",
          absl::StrCat("argument object ", arg.stored.Hex(), " is lost: ", got.status().message()),
          Location(task)};
      return;
    }
    args.push_back(std::move(*got));
  }
  task.args_fetched_tick = TaskEvents().Tick();  // ARGS_FETCHED
  if (task.kind == proto::TaskKind::ACTOR_CREATION) {
    actor_instance_ = fn->create(args);
    *result = codec::EncodeValue<uint8_t>(0);
    // Concurrent actors run calls on several executor threads.
    absl::MutexLock lock(&threads_mu_);
    for (uint32_t i = 1; i < task.max_concurrency; ++i) threads_.emplace_back([this] { Loop(); });
  } else if (task.kind == proto::TaskKind::ACTOR_METHOD) {
    *result = fn->call(actor_instance_.get(), args);
  } else {
    *result = fn->invoke(args);
  }
}

std::string TaskExecutor::Location(const TaskToRun& task) const {
  return absl::StrCat("task ", task.function, where_);
}

std::optional<Failure> TaskExecutor::StoreResult(const ObjectId& id, const std::string& result,
                                                 const TaskToRun& task) {
  auto created = host_.CreateInStore(id, result.size());
  if (created.status().code() == absl::StatusCode::kAlreadyExists) {
    // An earlier attempt stored it before dying: the value is the same, if it
    // got as far as sealing it.
    absl::Status sealed = host_.CheckSealed(id);
    if (sealed.ok()) return std::nullopt;
    return Failure{proto::FailureKind::OTHER, "",
                   absl::StrCat("an earlier attempt left the result unfinished: ",
                                sealed.message()),
                   Location(task)};
  }
  if (!created.ok()) {
    return Failure{created.status().code() == absl::StatusCode::kResourceExhausted
                       ? proto::FailureKind::STORE_FULL
                       : proto::FailureKind::OTHER,
                   "", std::string(created.status().message()), Location(task)};
  }
  std::memcpy(*created, result.data(), result.size());
  absl::Status sealed = host_.SealInStore(id, result.size());
  if (!sealed.ok()) {
    return Failure{proto::FailureKind::OTHER, "", std::string(sealed.message()), Location(task)};
  }
  return std::nullopt;
}

void TaskExecutor::Execute(TaskToRun& task) {
  // The task's events go to its owner in the reply (running_tasks.h): its
  // start on the system clock, and the ticks that split its span into phases.
  const bool events = TaskEvents().enabled();
  const int64_t start_us = TaskEventRecorder::NowMicros();
  const uint64_t start_tick = events ? TaskEventClock::Now() : 0;
  RunningTasks::Entry& running = running_.EntryOfThisThread();
  if (events) {
    task.args_fetched_tick = 0;
    running.Begin(task.task_id, task.attempt, &task.function, task.kind != proto::TaskKind::NORMAL,
                  start_tick);
  }
  std::string result;
  std::optional<Failure> failure;
  in_task = true;
  host_.TaskStarting(task.kind, task.function);
  if (task.kind == proto::TaskKind::ACTOR_CREATION) actor_gpu_ids_ = task.gpu_ids;
  UseGpus(task.kind == proto::TaskKind::ACTOR_METHOD ? actor_gpu_ids_ : task.gpu_ids);
  try {
    Invoke(task, &result, &failure);
  } catch (...) {
    // The user's code threw: its exception becomes the task's failure.
    const absl::Status thrown = ExecutorStatusOfCurrentException();
    switch (ErrorKindOf(thrown)) {
      case ErrorKind::kTypeMismatch:
        failure = Failure{proto::FailureKind::TYPE_MISMATCH, "lumen::TypeMismatchError",
                          std::string(thrown.message()), Location(task)};
        break;
      case ErrorKind::kObjectLost:
        failure = Failure{proto::FailureKind::OBJECT_LOST, "lumen::ObjectLostError",
                          std::string(thrown.message()), Location(task)};
        break;
      default: {
        TaskErrorParts parts = TaskErrorPartsOf(thrown);
        failure = Failure{proto::FailureKind::TASK_ERROR, std::move(parts.exception_type),
                          std::move(parts.task_message), Location(task)};
      }
    }
  }
  in_task = false;
  const uint64_t executed_tick = TaskEvents().Tick();  // EXECUTED

  OutMessage reply;
  auto r = reply.Init().initTaskReply();
  r.setTaskId(DataOf(task.task_id));
  r.setAttempt(task.attempt);
  if (!failure && result.size() > options_.inline_limit) {
    ObjectId id = ObjectId::ForTaskReturn(task.task_id, 1);
    failure = StoreResult(id, result, task);
    if (!failure) {
      auto stored = r.initResult().initStored();
      stored.setObjectId(DataOf(id));
      stored.setSize(result.size());
      stored.setNodeId(DataOf(options_.node_id));
      stored.setNodeAddress(options_.node_address);
    }
  }
  if (failure) {
    FailureToProto(*failure, r.initResult().initError());
  } else if (result.size() <= options_.inline_limit) {
    r.initResult().setInline(BytesOf(result));
  }
  const int64_t end_us = TaskEventRecorder::NowMicros();
  // The system clock may step: a span is never negative.
  const auto exec_micros = static_cast<uint64_t>(std::max<int64_t>(0, end_us - start_us));
  r.setExecMicros(exec_micros);
  // Only held replies ask how long a function runs: no lookup per task otherwise.
  if (options_.hold_replies > 0) task_durations.Record(task.function, exec_micros);
  if (events) {
    const uint64_t end_tick = TaskEventClock::Now();
    if (running.End()) {
      // A flush recorded its STARTED while it ran: the rest is recorded here.
      TaskEvents().Record(
          TaskEventKind::kResultStored, task.task_id, task.attempt, {},
          {.earlier_ticks = {task.args_fetched_tick, executed_tick}, .at_tick = end_tick});
    } else {
      SetExecution(r, ExecutionOf(start_us, exec_micros, start_tick, task.args_fetched_tick,
                                  executed_tick, end_tick));
      r.setWorkerPid(pid_);
      if (task.kind != proto::TaskKind::NORMAL) r.setNodeId(DataOf(options_.node_id));
    }
  }
  bool exiting = receiver_.is_actor() && this_call_exits;
  this_call_exits = false;
  if (exiting) r.setActorExiting(true);
  // This thread's reply buffer, reused (one allocation per task otherwise);
  // one that a large inline result grew is let go after the send.
  thread_local std::string frame;
  frame.clear();
  AppendFrame(reply.builder(), &frame);
  absl::Cleanup shrink = [] {
    if (frame.capacity() > kKeptReplyBytes) std::string().swap(frame);
  };
  if (!exiting) {
    // Another task waits and this one was short: the reply goes with the
    // next ones (held_replies.h), one write for several. Plain tasks only:
    // their owner queues several here only while they run short (pipelining);
    // an actor's calls queue whatever their length, and an earlier call's
    // result must not wait behind a later call that blocks on something else.
    if (held_batch != nullptr && task.kind == proto::TaskKind::NORMAL &&
        receiver_.queued() > 0 &&
        task_durations.KnownShort(task.function, options_.short_task_micros) &&
        Hold(*held_batch, task.reply_to, frame)) {
      return;
    }
    SendWithHeld(task.reply_to, frame);
    return;
  }
  // No further calls run here; the host ends the process once the reply is out.
  receiver_.DropQueued();
  FlushHeldReplies();
  host_.SendLastReplyAndExit(task.reply_to, frame);
}

}  // namespace lumen::runtime
