// CoreWorker, worker mode: the task receiver and executor (queue, hand-back
// of queued tasks while the running one blocks, executor threads, results).
#include "lumen/worker/core_worker.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <typeinfo>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "core/worker/output_tagger.h"
#include "core/worker/task_event_flusher.h"
#include "core/worker/worker_state.h"
#include "lumen/common/codec.h"
#include "lumen/common/head_client.h"
#include "lumen/common/logging.h"
#include "lumen/common/process.h"
#include "lumen/common/proto_util.h"
#include "lumen/common/task_events.h"
#include "lumen/errors.h"
#include "lumen/objectstore/fd_passing.h"
#include "lumen/objectstore/object_table.h"

namespace lumen::runtime {

void CoreWorker::NotifyBlocked(bool blocked) {
  if (!options_.is_worker || !in_task) return;
  // Tasks queued behind this one could be what it waits for: a plain worker
  // hands them back to their owners to run elsewhere (this is not a failed
  // attempt), and the ones that arrive while it waits too.
  for (auto& task : receiver_->SetBlocked(blocked)) {
    std::weak_ptr<Connection> reply_to = task->reply_to;
    PostToIo("worker.hand_back_queued_task", [this, reply_to, id = task->task_id, attempt = task->attempt] {
      if (auto conn = reply_to.lock()) SendRequeued(*conn, id, attempt);
    });
  }
  SendToNode([blocked](proto::Envelope::Builder env) {
    if (blocked) {
      env.setWorkerBlocked();
    } else {
      env.setWorkerUnblocked();
    }
  });
}

// ---------------------------------------------------------------------------
// Task execution (worker mode)

void CoreWorker::RunTaskLoop() {
  ExecutorLoop();
  for (auto& t : executor_threads_) t.join();
}

void CoreWorker::ExecutorLoop() {
  auto give_up = [this] { return node_lost_.load(); };
  while (!node_lost_ && !stopped_) {
    // Spin briefly, then block (up to 200 ms, to notice stopped_).
    bool spun = SpinFor(std::chrono::microseconds(100),
                        [&] { return receiver_->HasQueued() || give_up(); });
    auto task = receiver_->Take(spun ? absl::ZeroDuration() : absl::Milliseconds(200), give_up);
    if (task) ExecuteTask(*task);
  }
}

namespace {
// Set by ExitActor() on the thread running the call that asked to exit.
thread_local bool this_call_exits = false;
// The GPUs of the task this thread runs (lumen::GetGpuIds).
thread_local std::vector<int> current_gpu_ids;
}  // namespace

std::vector<int> CoreWorker::CurrentGpuIds() { return current_gpu_ids; }

void CoreWorker::SetGpuIds(proto::TaskSpec::Builder spec, const std::vector<int>& ids) {
  auto list = spec.initGpuIds(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) list.set(i, ids[i]);
}

namespace {
// CUDA_VISIBLE_DEVICES as this process last set it (nullopt: never). Executor
// threads of a concurrent actor set it at once: one at a time.
absl::Mutex gpu_env_mu;
std::optional<std::string> gpu_env_value ABSL_GUARDED_BY(gpu_env_mu);
}  // namespace

void CoreWorker::UseGpus(const std::vector<int>& ids) {
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

void CoreWorker::ExitActorAfterCall() {
  if (!receiver_->is_actor() || !in_task) {
    throw Error("lumen::ExitActor() must be called inside an actor method");
  }
  this_call_exits = true;
  receiver_->StopAfterCurrent();  // no further calls start
}

void CoreWorker::ExitProcessWhenFlushed() {
  // Runs on the io thread: once every queued reply is written (or after
  // exit_flush_timeout, if a peer stops reading), leave.
  static const auto deadline = std::chrono::steady_clock::now() + options_.timeouts.exit_flush_timeout;
  bool flushed = true;
  for (auto& [id, conn] : inbound_) flushed &= conn->closed() || conn->idle();
  if (!flushed && std::chrono::steady_clock::now() < deadline) {
    auto timer = std::make_shared<boost::asio::steady_timer>(io_, std::chrono::milliseconds(1));
    timer->async_wait([this, timer](const boost::system::error_code&) { ExitProcessWhenFlushed(); });
    return;
  }
  // A clean exit: our last task events go to the node first.
  if (event_flusher_) event_flusher_->FlushBeforeClose();
  std::fflush(stdout);
  std::fflush(stderr);
  ::unlink(unix_path_.c_str());
  std::_Exit(0);
}

void CoreWorker::ExecuteTask(TaskToRun& task) {
  auto start = std::chrono::steady_clock::now();
  TaskEvents().Record(TaskEventKind::kStarted, task.task_id, task.attempt, task.function, {.node = node_id_, .worker = options_.worker_id, .actor_call = task.kind != proto::TaskKind::NORMAL});
  std::string location =
      absl::StrCat("task ", task.function, ", pid ", ::getpid(), " on node ",
                   node_id_.Hex().substr(0, 12), ", binary ", exe_path_);
  std::string result;
  std::optional<Failure> failure;
  in_task = true;
  // actor_name_ was set on the io thread before the creation task was queued here.
  output_tagger_->TaskStarting(task.kind, task.function, actor_name_);
  if (task.kind == proto::TaskKind::ACTOR_CREATION) actor_gpu_ids_ = task.gpu_ids;
  UseGpus(task.kind == proto::TaskKind::ACTOR_METHOD ? actor_gpu_ids_ : task.gpu_ids);
  try {
    const internal::RemoteFunction* fn = internal::FindRemoteFunction(task.function);
    auto expected = task.kind == proto::TaskKind::ACTOR_CREATION
                        ? internal::RemoteFunction::Kind::kActorFactory
                    : task.kind == proto::TaskKind::ACTOR_METHOD
                        ? internal::RemoteFunction::Kind::kMethod
                        : internal::RemoteFunction::Kind::kFunction;
    if (fn != nullptr && fn->kind != expected) {
      failure = Failure{proto::FailureKind::OTHER, "lumen::Error",
                        absl::StrCat("'", task.function,
                                     "' is registered, but not as what was called (a task, an "
                                     "actor factory or an actor method)"),
                        location};
    } else if (task.kind == proto::TaskKind::ACTOR_METHOD && actor_instance_ == nullptr) {
      failure = Failure{proto::FailureKind::OTHER, "lumen::Error",
                        "this worker holds no actor instance", location};
    } else if (fn == nullptr) {
      failure = Failure{proto::FailureKind::FUNCTION_NOT_FOUND, "lumen::FunctionNotFound",
                        absl::StrCat("function '", task.function,
                                     "' is not registered in the worker binary ", exe_path_,
                                     " (is it listed in LUMEN_REMOTE(...) in the binary the "
                                     "workers run?)"),
                        location};
    } else {
      std::vector<internal::ObjectBytes> args;
      args.reserve(task.args.size());
      for (auto& arg : task.args) {
        if (!arg.is_stored) {
          args.push_back(internal::ObjectBytes{arg.value, nullptr});
          continue;
        }
        StoreResult got = GetOrPull(arg.stored, arg.size, arg.node, arg.node_address, arg.owner);
        if (!got.status.ok()) {
          throw ObjectLostError(absl::StrCat("argument object ", arg.stored.Hex(),
                                             " is lost: ", got.status.message()));
        }
        args.push_back(PinnedBytes(arg.stored, got.offset, got.size));
      }
      TaskEvents().Record(TaskEventKind::kArgsFetched, task.task_id, task.attempt);
      if (task.kind == proto::TaskKind::ACTOR_CREATION) {
        actor_instance_ = fn->create(args);
        result = codec::EncodeValue<uint8_t>(0);
        // Concurrent actors run calls on several executor threads.
        for (uint32_t i = 1; i < task.max_concurrency; ++i) {
          executor_threads_.emplace_back([this] { ExecutorLoop(); });
        }
      } else if (task.kind == proto::TaskKind::ACTOR_METHOD) {
        result = fn->call(actor_instance_.get(), args);
      } else {
        result = fn->invoke(args);
      }
    }
  } catch (const TypeMismatchError& e) {
    failure = Failure{proto::FailureKind::TYPE_MISMATCH, "lumen::TypeMismatchError", e.what(),
                      location};
  } catch (const ObjectLostError& e) {
    failure = Failure{proto::FailureKind::OBJECT_LOST, "lumen::ObjectLostError", e.what(),
                      location};
  } catch (const std::exception& e) {
    failure = Failure{proto::FailureKind::TASK_ERROR, codec::Demangle(typeid(e).name()), e.what(),
                      location};
  } catch (...) {
    failure = Failure{proto::FailureKind::TASK_ERROR, "unknown", "a non-std exception was thrown",
                      location};
  }
  in_task = false;
  TaskEvents().Record(TaskEventKind::kExecuted, task.task_id, task.attempt);

  auto reply = std::make_shared<OutMessage>();
  auto r = reply->Init().initTaskReply();
  r.setTaskId(DataOf(task.task_id));
  r.setAttempt(task.attempt);
  if (!failure && result.size() > options_.inline_limit) {
    ObjectId id = ObjectId::ForTaskReturn(task.task_id, 1);
    StoreResult created = CallStore(kCreate, id, result.size());
    if (created.status.code() == absl::StatusCode::kAlreadyExists) {
      // An earlier attempt stored it before dying: the value is the same, if it
      // got as far as sealing it.
      StoreResult sealed = CallStore(kGet, id, 0);
      if (sealed.status.ok()) {
        SendToNode([id](proto::Envelope::Builder env) {
          env.initStoreRelease().setObjectId(DataOf(id));
        });
      } else {
        failure = Failure{proto::FailureKind::OTHER, "",
                          absl::StrCat("an earlier attempt left the result unfinished: ",
                                       sealed.status.message()),
                          location};
      }
    } else if (!created.status.ok()) {
      failure = Failure{created.status.code() == absl::StatusCode::kResourceExhausted
                            ? proto::FailureKind::STORE_FULL
                            : proto::FailureKind::OTHER,
                        "", std::string(created.status.message()), location};
    } else {
      store_->PrefaultForWrite(created.offset, result.size());
      std::memcpy(store_->writable_base() + created.offset, result.data(), result.size());
      StoreResult sealed = CallStore(kSeal, id, result.size());
      if (!sealed.status.ok()) {
        failure = Failure{proto::FailureKind::OTHER, "", std::string(sealed.status.message()),
                          location};
      }
    }
    if (!failure) {
      auto stored = r.initResult().initStored();
      stored.setObjectId(DataOf(id));
      stored.setSize(result.size());
      stored.setNodeId(DataOf(node_id_));
      stored.setNodeAddress(node_address_);
    }
  }
  if (failure) {
    FailureToProto(*failure, r.initResult().initError());
  } else if (result.size() <= options_.inline_limit) {
    r.initResult().setInline(BytesOf(result));
  }
  r.setExecMicros(static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                            std::chrono::steady_clock::now() - start)
                                            .count()));
  TaskEvents().Record(TaskEventKind::kResultStored, task.task_id, task.attempt);
  bool exiting = receiver_->is_actor() && this_call_exits;
  this_call_exits = false;
  if (exiting) r.setActorExiting(true);
  std::string frame;
  AppendFrame(reply->builder(), &frame);
  if (!exiting) {
    // The common case: the reply goes out from this thread, without waking the
    // io thread. (If this is the last reference, the connection is already
    // closed and dies here harmlessly.)
    if (auto conn = task.reply_to.lock()) {
      if (!conn->TrySendNow(frame)) PostToIo("worker.flush_reply", [conn] { conn->Flush(); });
    }
    return;
  }
  PostToIo("worker.send_task_reply", [this, weak = task.reply_to, frame = std::move(frame), exiting] {
    if (auto conn = weak.lock()) conn->SendFramed(frame);
    if (exiting) {
      if (auto owner = actor_owner_conn_.lock()) {
        OutMessage out;
        out.Init().setActorExiting();
        owner->Send(out.builder());
      }
      ExitProcessWhenFlushed();
    }
  });
  if (exiting) {
    // No further calls run here; the io thread ends the process once the reply
    // is out.
    receiver_->DropQueued();
    absl::Notification never;
    never.WaitForNotification();
  }
}

}  // namespace lumen::runtime
