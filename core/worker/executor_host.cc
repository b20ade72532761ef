// CoreWorker, worker mode: the executor's host (the store, argument pulls,
// replies), the hand-back of queued tasks while the running one blocks, and
// the end of an actor that exits on purpose or is killed, and the actor's
// identity (set and read by the owner service through ServiceHost). The
// executor itself is TaskExecutor (task_executor.h).
#include "core/worker/executor_host.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "core/worker/actor_names.h"
#include "core/worker/head_requester.h"
#include "core/worker/lost_copies.h"
#include "core/worker/object_getter.h"
#include "core/worker/output_tagger.h"
#include "core/worker/task_event_flusher.h"
#include "core/worker/worker_state.h"
#include "lumen/common/logging.h"
#include "lumen/common/proto_util.h"
#include "lumen/objectstore/object_table.h"
#include "lumen/worker/api_error.h"

namespace lumen::runtime {
namespace {

// LUMEN_DEFER_REPLIES_AT_QUEUED (default: 48 in a worker running normal
// tasks, 16 in an actor's; 0: never): how many tasks must wait in the receive
// queue for a reply to be handed to the io thread rather than written by the
// executor (see SendReply). Read once per process.
//
// A normal-task owner pipelines at most 48 tasks to one worker
// (`CoreWorkerOptions::max_tasks_in_flight_per_worker`, NormalTaskSubmitter::
// PipelineDepth) and sends the next only when a reply comes back, so a later
// reply is a slower pipeline: at most 47 of its tasks wait here, and its
// replies are never deferred (idle A/B, doc/benchmark.md: 8 against a depth of
// 16 lost 15-35 % of `single_client_tasks_async`; 16 against a depth of 48,
// stop 38, ~0.87). Actor calls arrive without such a window, thousands
// queued, and gain from the batching (`1_1_actor_calls_async` about 2x; 48
// there made `n_n_actor_calls_async` ~0.92 of 16's, stop 38).
int DeferRepliesAtQueued(bool actor) {
  static const int at = [] {
    const char* v = std::getenv("LUMEN_DEFER_REPLIES_AT_QUEUED");
    return v != nullptr ? std::atoi(v) : -1;
  }();
  if (at >= 0) return at;
  return actor ? 16 : NormalTaskSubmitter::Options{}.max_tasks_in_flight_per_worker;
}

}  // namespace

absl::StatusOr<internal::ObjectBytes> CoreWorker::ExecutorHost::FetchArgument(
    const TaskToRun::Arg& arg) {
  ObjectGetter& getter = *core_.object_getter_;
  StoreProvider& store = *core_.store_provider_;
  StoreResult got = getter.GetOrPull(arg.stored, arg.size, arg.node, arg.node_address, arg.owner);
  if (got.ok()) return store.PinnedBytes(arg.stored, got->offset, got->size);
  // The copy we were sent to could not be read (its node died, or the copy
  // went): as Ray's worker does, ask the owner, which forgets that copy and
  // rebuilds the object from its lineage when none is left, and wait for
  // where it is now. The wait ends when the rebuild does (bounded by its
  // task's retries), the object fails, or the owner dies. A few rounds: a
  // copy that vanishes again is asked about again.
  NodeId node = arg.node;
  std::string node_address = arg.node_address;
  uint64_t size = arg.size;
  for (int round = 0; round < 3; ++round) {
    const absl::StatusCode code = got.status().code();
    if (arg.owner.empty() || code == absl::StatusCode::kResourceExhausted ||
        code == absl::StatusCode::kPermissionDenied || core_.stopped_ || core_.node_lost_) {
      break;
    }
    const std::string why(got.status().message());
    // While it waits its CPU goes back to the node (the rebuild may need it).
    core_.NotifyBlocked(true);
    auto copy = core_.lost_copies_->RecoverFromOwner(arg.stored, arg.owner, node, why);
    core_.NotifyBlocked(false);
    if (!copy.ok()) {
      return absl::Status(copy.status().code(),
                          absl::StrCat(why, "; then ", copy.status().message()));
    }
    if (copy->inline_value) {
      return internal::ObjectBytes{*copy->inline_value, copy->inline_value};
    }
    if (copy->node == node && copy->node_address == node_address) break;  // nothing new
    node = copy->node;
    node_address = copy->node_address;
    size = copy->size;
    got = getter.GetOrPull(arg.stored, size, node, node_address, arg.owner);
    if (got.ok()) return store.PinnedBytes(arg.stored, got->offset, got->size);
  }
  return got.status();
}

absl::StatusOr<uint8_t*> CoreWorker::ExecutorHost::CreateInStore(const ObjectId& id,
                                                                 uint64_t size) {
  return core_.store_provider_->CreateWritable(id, size);
}

void CoreWorker::ExecutorHost::TaskStarting(proto::TaskKind kind, const std::string& function) {
  if (core_.output_tagger_) core_.output_tagger_->TaskStarting(kind, function, core_.actor_name_);
}

absl::Status CoreWorker::ExecutorHost::SealInStore(const ObjectId& id, uint64_t size) {
  return core_.store_provider_->Seal(id, size);
}

absl::Status CoreWorker::ExecutorHost::CheckSealed(const ObjectId& id) {
  StoreResult got = core_.store_provider_->Get(id);
  if (!got.ok()) return got.status();
  // The get pinned it: unpin.
  core_.store_provider_->Release(id);
  return absl::OkStatus();
}

void CoreWorker::ExecutorHost::SendReply(const std::weak_ptr<Connection>& reply_to,
                                         std::string_view frames) {
  // (If this is the last reference, the connection is already closed and dies
  // here harmlessly.)
  if (auto conn = reply_to.lock()) {
    // While several tasks wait, more replies follow within microseconds: queue
    // this one for the io thread, which writes all that queued by the time it
    // runs in one send (one wake-up per batch, none while a write or flush is
    // due). Waking an idle io thread costs about four system calls between the
    // two threads (epoll_ctl and a futex wake here, epoll_wait and a futex
    // wait there) against one send per reply, so it pays only for a queue of
    // DeferRepliesAtQueued() or more. Otherwise (the synchronous round trip, a
    // worker that keeps up) write it from here at once, without a hop.
    const int at = DeferRepliesAtQueued(core_.receiver_->is_actor());
    bool more = at > 0 && core_.receiver_->queued() >= at;
    if (conn->SendFromAnyThread(frames, /*now=*/!more)) {
      core_.PostToIo("worker.flush_replies", [conn] { conn->Flush(); });
    }
  }
}

void CoreWorker::ExecutorHost::RunAfter(std::chrono::microseconds delay,
                                         std::function<void()> fn) {
  CoreWorker* core = &core_;
  // (Refused once the runtime stops: the executor threads flush at their end.)
  core_.PostToIo("worker.hold_timer", [core, delay, fn = std::move(fn)]() mutable {
    auto timer = std::make_shared<boost::asio::steady_timer>(core->io_, delay);
    timer->async_wait([timer, fn = std::move(fn)](const boost::system::error_code& ec) {
      if (!ec) fn();
    });
  });
}

void CoreWorker::ExecutorHost::SendLastReplyAndExit(const std::weak_ptr<Connection>& reply_to,
                                                    std::string frame) {
  CoreWorker* core = &core_;
  core_.PostToIo("worker.send_last_reply", [core, reply_to, frame = std::move(frame)] {
    if (auto conn = reply_to.lock()) conn->SendFramed(frame);
    if (auto owner = core->actor_owner_conn_.lock()) {
      OutMessage out;
      out.Init().setActorExiting();
      owner->Send(out.builder());
    }
    core->ExitProcessWhenFlushed();
  });
  // No further calls run here; the io thread ends the process once the reply
  // is out.
  absl::Notification never;
  never.WaitForNotification();
}

bool CoreWorker::BlockingTellsNode() const { return options_.is_worker && TaskExecutor::InTask(); }

void CoreWorker::NotifyBlocked(bool blocked) {
  if (!BlockingTellsNode()) return;
  // Replies this thread held back go first: what we wait for may need them.
  if (blocked) FlushHeldReplies();
  // Tasks queued behind this one could be what it waits for: a plain worker
  // hands them back to their owners to run elsewhere (this is not a failed
  // attempt), and the ones that arrive while it waits too.
  for (auto& task : receiver_->SetBlocked(blocked)) {
    std::weak_ptr<Connection> reply_to = task->reply_to;
    PostToIo("worker.hand_back_queued_task", [reply_to, id = task->task_id, attempt = task->attempt] {
      if (auto conn = reply_to.lock()) OwnerService::SendRequeued(*conn, id, attempt);
    });
  }
  store_provider_->SendToNode([blocked](proto::Envelope::Builder env) {
    if (blocked) {
      env.setWorkerBlocked();
    } else {
      env.setWorkerUnblocked();
    }
  });
}

void CoreWorker::RunTaskLoop() { executor_->Run(); }

void CoreWorker::FlushHeldReplies() {
  if (executor_) executor_->FlushHeldReplies();
}

std::vector<int> CoreWorker::CurrentGpuIds() { return TaskExecutor::CurrentGpuIds(); }

void CoreWorker::SetGpuIds(proto::TaskSpec::Builder spec, const std::vector<int>& ids) {
  auto list = spec.initGpuIds(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) list.set(i, ids[i]);
}

void CoreWorker::ExitActorAfterCall() {
  absl::Status s = executor_ ? executor_->ExitAfterCurrentCall()
                             : absl::FailedPreconditionError(
                                   "lumen::ExitActor() must be called inside an actor method");
  if (!s.ok()) ThrowError(ErrorKind::kError, std::string(s.message()));
}

void CoreWorker::ExitProcessWhenFlushed() {
  // Runs on the io thread: once every queued reply is written (or after
  // exit_flush_timeout, if a peer stops reading), leave.
  static const auto deadline = std::chrono::steady_clock::now() + options_.timeouts.exit_flush_timeout;
  bool flushed = owner_service_->InboundFlushed();
  if (!flushed && std::chrono::steady_clock::now() < deadline) {
    auto timer = std::make_shared<boost::asio::steady_timer>(io_, std::chrono::milliseconds(1));
    timer->async_wait([this, timer](const boost::system::error_code&) { ExitProcessWhenFlushed(); });
    return;
  }
  // A clean exit: our last task events go to the node first.
  if (event_flusher_) event_flusher_->FlushBeforeClose();
  std::fflush(stdout);
  std::fflush(stderr);
  ::unlink(owner_service_->unix_path().c_str());
  std::_Exit(0);
}

void CoreWorker::ServiceHost::OnBecomeActor(Connection& owner, const ObjectId& id,
                                            std::string name) {
  core_.actor_owner_conn_ = owner.weak_from_this();
  core_.actor_id_ = id;
  core_.actor_name_ = std::move(name);
}

void CoreWorker::ServiceHost::OnKillUnowned(const ObjectId& id) {
  if (!core_.receiver_->is_actor() || id != core_.actor_id_) return;
  // Told directly (its owner is gone): free the name (without blocking the io
  // thread; the head call has a deadline) and end.
  CoreWorker* core = &core_;
  auto exit_now = [core] {
    std::fflush(stdout);
    std::fflush(stderr);
    ::unlink(core->owner_service_->unix_path().c_str());
    std::_Exit(0);
  };
  const std::string& name = core_.actor_name_;
  if (name.empty() || core_.options_.head_address.empty()) exit_now();
  core_.head_->Call(
      [name, id](proto::Envelope::Builder env) {
        FillActorName(env.initUnregisterActorName(), name, id);
      },
      [exit_now, name](absl::StatusOr<proto::Envelope::Reader> reply) {
        if (!reply.ok()) {
          LUMEN_LOG(WARNING) << "cannot free actor name '" << name << "': " << reply.status();
        }
        exit_now();
      });
}

}  // namespace lumen::runtime
