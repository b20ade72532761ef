// The runtime inside every driver and worker process (Ray's "core worker"):
// task submission over worker leases, the owner's reference table, Put/Get/Wait
// through the node's shared-memory store, and, in a worker, task execution.
//
// CoreWorker is the facade and composition root: it owns the io thread and the
// parts, and its implementation is split by responsibility over core/worker/:
//   CoreWorker's own files (its methods, one responsibility each):
//     core_worker.cc       startup, shutdown, dispatch of node-daemon frames
//     object_api.cc        Put, Get, Wait (through StoreProvider, ObjectGetter)
//     node_connections.cc  what we ask of node daemons and other owners (flush,
//                          exit causes, lease ends, borrower messages); a
//                          node's or another owner's loss; ConnectionsHost
//     task_submission.cc   SubmitTask, hand-off to the actor or normal submitter
//     task_cancel.cc       lumen::Cancel
//     lease_resend.cc      NodeLeaseTransport: keyed lease requests, resent
//     executor_host.cc     worker mode: ExecutorHost, the TaskExecutor's host;
//                          the actor process's identity and end (ServiceHost)
//     state_rows.cc        `lumen list` rows of what this process owns
//     actor_owner.cc       actor entry points; ActorHost (actor_host.h), the
//                          runtime half of lumen/actors' ActorOwner
//     actor_caller.cc      ActorCaller (actor_caller.h), the runtime half of
//                          lumen/actors' ActorTaskSubmitter
//     actor_names.cc       the head's actor-name requests (actor_names.h)
//   Parts with a class of their own, each in its .h/.cc pair:
//     ObjectTable (object_table.h), ReferenceCounter, MemoryStore,
//     StoreProvider (create/seal/abort/get/pull/release/delete in the node's
//     store; the store's mapping and the pins of the views it hands out),
//     ObjectGetter (Get/Wait: memory store -> owner -> pull, other copies),
//     LostCopies (an unreadable copy: the owner's rebuild, the reader's wait),
//     OwnerService (our listeners, hello admission, and what peers ask:
//     waits, locations, borrowers, kills, pushed tasks) with its
//     BorrowerRegistry, OutboundConnections (the connections we open to node
//     daemons and other owners, and the requests awaiting replies on them),
//     DependencyResolver, LeaseRequester, NormalTaskSubmitter, TaskManager,
//     ObjectRecovery (lineage), SubmissionQueue, TaskReceiver, TaskExecutor,
//     HeldReplies, HeadRequester, TaskEventFlusher, OutputTagger,
//     WorkerLogPrinter, CallSites; ShardedNodeMap (sharded_node_map.h) and
//     IoPoster (io_poster.h: posts to the io thread, refused once stopping).
//   Data and pure helpers: PendingTask and ActorRecord (pending_task.h), an
//     object's value on the wire (object_value.h), the private state types
//     and the hosts and transports CoreWorker implements (worker_state.h).
//   The API's runtime glue: function_registry.cc (remote functions, actor
//   factories and methods by name) and ref_handle.cc (internal::RefHandle).
//
// Threads: one io thread runs the event loop and owns every socket; user threads
// (and, in a worker, the executor thread) call the public methods, which are
// thread-safe. The per-object table (ObjectTable) has its own lock, shared by
// the ReferenceCounter and the MemoryStore; state marked "io thread only" is
// touched there alone.
#pragma once

#include <atomic>
#include <boost/asio.hpp>
#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <source_location>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/container/node_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "lumen/actors/actor_call.h"
#include "lumen/actors/actor_lifecycle.h"
#include "lumen/actors/actor_owner.h"
#include "lumen/actors/actor_task_submitter.h"
#include "lumen/common/address.h"
#include "lumen/common/connection.h"
#include "lumen/common/ids.h"
#include "lumen/common/thread_checker.h"
#include "lumen/common/timeouts.h"
#include "lumen/common/post.h"
#include "lumen/internal/runtime.h"
#include "lumen/objectstore/shm_segment.h"

namespace lumen::runtime {

class HeadRequester;   // core/worker/head_requester.h
class IoPoster;        // core/worker/io_poster.h
class StoreProvider;   // core/worker/store_provider.h
class ObjectGetter;    // core/worker/object_getter.h
class LostCopies;      // core/worker/lost_copies.h
class LeaseRequester;  // core/worker/lease_requester.h
class OwnerService;      // core/worker/owner_service.h
class OutboundConnections;  // core/worker/outbound_connections.h
struct ObjectEntry;       // core/worker/object_table.h
class ObjectTable;        // core/worker/object_table.h
class ReferenceCounter;   // core/worker/reference_counter.h
class MemoryStore;        // core/worker/memory_store.h
class TaskManager;        // core/worker/task_manager.h
class PendingTaskPool;    // core/worker/pending_task_pool.h
class ObjectRecovery;     // core/worker/object_recovery.h
class TaskEventFlusher;   // core/worker/task_event_flusher.h
class OutputTagger;       // core/worker/output_tagger.h
class DependencyResolver; // core/worker/dependency_resolver.h
class NormalTaskSubmitter; // core/worker/normal_task_submitter.h
class TaskReceiver;        // core/worker/task_receiver.h
class SubmissionQueue;     // core/worker/submission_queue.h
class TaskExecutor;        // core/worker/task_executor.h
struct TaskToRun;          // core/worker/task_receiver.h
struct PendingTask;       // core/worker/pending_task.h
struct ActorRecord;       // core/worker/pending_task.h (the runtime's actors::ActorSpec)

struct CoreWorkerOptions {
  bool is_worker = false;
  std::string node_socket;  // the node daemon's Unix socket
  std::string node_host = "127.0.0.1";  // where this node's processes listen (TCP)
  std::string session_dir;
  std::string head_address;  // for named actors
  JobId job_id;             // driver: nil (the node assigns one); worker: its job
  WorkerId worker_id;
  uint64_t inline_limit = kInlineObjectLimit;
  int max_tasks_in_flight_per_worker = 48;  // NormalTaskSubmitter::PipelineDepth's most
  int max_pending_lease_requests = 4;
  // Driver: have the node daemons forward its workers' stdout/stderr to it
  // (Config::log_to_driver, LUMEN_LOG_TO_DRIVER).
  bool log_to_driver = true;
  // Used here: lease_idle_timeout, worker_exit_cause_timeout, head_call_timeout,
  // lease_retry_delay, spillback_retry_delay, exit_flush_timeout, connect_timeout.
  Timeouts timeouts = Timeouts::FromEnv();
};

// Why a value is not there: the payload of a failed object.
using Failure = actors::TaskFailure;

class CoreWorker {
 public:
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<CoreWorker>> Start(
      CoreWorkerOptions options);
  ~CoreWorker();

  // Stops the io thread and closes every connection. Idempotent.
  void Stop();

  const std::string& address() const { return listen_address_; }
  const NodeId& node_id() const { return node_id_; }
  const std::string& head_address() const { return options_.head_address; }
  const JobId& job_id() const { return options_.job_id; }
  // Unique per CoreWorker made in this process (from 1): a RefHandle's cached
  // entry belongs to the runtime of its generation (RefHandle::entry).
  uint64_t generation() const { return generation_; }

  // --- thread-safe API used by lumen.h ---
  std::shared_ptr<internal::RefHandle> SubmitTask(std::string_view function,
                                                  std::vector<internal::TaskArgument> args,
                                                  const internal::TaskOptions& options);
  // `where`: the Put call site recorded for a stored value (`lumen memory`).
  std::shared_ptr<internal::RefHandle> PutEncoded(std::string encoded,
                                                  const std::source_location& where = {});
  std::shared_ptr<internal::RefHandle> PutWithWriter(uint64_t size,
                                                     const std::function<void(uint8_t*)>& write,
                                                     const std::source_location& where = {});
  std::vector<internal::ObjectBytes> Get(const std::vector<const internal::RefHandle*>& refs,
                                         std::optional<std::chrono::milliseconds> timeout);
  std::vector<bool> Wait(const std::vector<const internal::RefHandle*>& refs, size_t num_returns,
                         std::optional<std::chrono::milliseconds> timeout);

  // Actors (see actors.cc).
  std::shared_ptr<internal::RefHandle> CreateActor(std::string_view factory,
                                                   std::vector<internal::TaskArgument> args,
                                                   const internal::ActorOptions& options);
  std::shared_ptr<internal::RefHandle> SubmitActorTask(
      const std::shared_ptr<internal::RefHandle>& actor, std::string_view method,
      std::vector<internal::TaskArgument> args);
  void KillActor(const internal::RefHandle& actor, bool no_restart);
  // lumen::Cancel (see task_cancel.cc); throws lumen::Error for a ref this
  // process does not own.
  void CancelTask(const internal::RefHandle& ref, bool force);
  std::shared_ptr<internal::RefHandle> GetNamedActor(const std::string& name);
  void ExitActorAfterCall();
  // The GPU ids given to the task running on the calling thread (none outside tasks).
  static std::vector<int> CurrentGpuIds();

  // Returns the object's entry, which stays put while the reference lives.
  ObjectEntry* AddLocalRef(const ObjectId& id, const std::string& owner, bool decoded);
  void RemoveLocalRef(const ObjectId& id);
  void MarkEscaped(const ObjectId& id);

  // Worker mode: runs tasks on the calling thread until the node goes away.
  void RunTaskLoop();
  // Sends the task replies the calling executor thread holds back
  // (held_replies.h; nothing on other threads): called before the running
  // task waits for anything (Get, Wait, a key-value or placement group
  // request) that could need those results at their owner first.
  void FlushHeldReplies();

 private:
  class ActorCaller;  // actor_caller.h
  class ActorHost;    // actor_host.h

  explicit CoreWorker(CoreWorkerOptions options);
  [[nodiscard]] absl::Status Connect();

  // io thread
  void OnNodeFrame(Connection& conn, proto::Envelope::Reader msg);
  // `lumen list actors|tasks|objects`: what this process owns, one row each.
  void SendStateRows(Connection& conn, uint64_t request_id, const std::string& what);
  // Tells `owner` we start (add) or stop borrowing `id` (any thread; posted).
  void SendBorrowerChange(const ObjectId& id, const std::string& owner, bool add);
  // Tells `owner` a borrowed ref of `id` was passed on (any thread; posted).
  void SendEscapeRef(const ObjectId& id, const std::string& owner);
  // io thread: takes the next chunk of submitted tasks and hands each on;
  // posts itself again while more wait (SubmissionQueue).
  void DrainSubmissions();
  // Schedules DrainSubmissions; when the runtime stops (nothing would run
  // it), fails every queued submission's result instead. Any thread.
  void PostDrainSubmissions();
  // Every argument of `task` is ready: an actor call goes in its actor's
  // order, a creation starts its actor, a task joins its shape's queue (or
  // fails with a failed argument's error). Takes ownership of a normal task.
  void OnTaskResolved(PendingTask* task);
  class NodeLeaseTransport;  // worker_state.h
  class ServiceHost;         // worker_state.h: OwnerService's host
  class ConnectionsHost;     // worker_state.h: OutboundConnections' host
  class SubmitterTransport;  // worker_state.h
  // The cluster declared `node` dead: leases, actors, requests and object
  // copies there go (node_connections.cc).
  void OnRemoteNodeDead(const NodeId& node);
  // Driver, before Stop: sends its task events to its node, and has every node
  // it uses forward what its workers wrote so far; waits for their answers
  // (at most exit_flush_timeout). Not on the io thread.
  void FlushToNodes();
  // Asks the node daemon `node` how worker `worker` ended. `done` runs once on
  // the io thread with the cause ("killed by signal 11 (SIGSEGV)"), or with ""
  // when the daemon does not know within options_.worker_exit_cause_timeout.
  void AskWorkerExitCause(const std::shared_ptr<Connection>& node, const WorkerId& worker,
                          std::function<void(std::string cause)> done);
  void SendLeaseEnd(const std::shared_ptr<Connection>& node, uint64_t lease_id, bool kill);
  // any thread
  // Runs `fn` on the io thread under `name` (a string literal saying what it
  // does, "worker.what_it_does": a slow handler is logged with it); false (and
  // `fn` dropped) once Stop has begun.
  bool PostToIo(const char* name, std::function<void()> fn);
  // Keeps `keep` alive until the handlers now on the io thread's stack returned
  // (a connection closing from inside its own callback). Posted even while
  // stopping: never run then, it is destroyed with the io context.
  template <class T>
  void ReleaseLater(std::shared_ptr<T> keep) {
    lumen::ReleaseLater(io_, "worker.release_later", std::move(keep));
  }
  // Large argument values go to the store (submitted tasks, actor creation).
  void MoveLargeArgumentsToStore(std::vector<internal::TaskArgument>& args);
  // Hands a submitted task (or actor call or creation) to the io thread.
  void Enqueue(std::unique_ptr<PendingTask> task);
  // The memory store's and reference counter's hooks into the runtime.
  void CreateObjectTracking();
  void OnNodeLost(const absl::Status& why);
  void NotifyBlocked(bool blocked);
  // Whether the calling thread blocking in the runtime is seen by the node: a
  // task's thread in a worker (NotifyBlocked tells the node, hands back queued
  // tasks). Such a thread spins briefly before it blocks; others block at once.
  bool BlockingTellsNode() const;

  // worker mode (executor_host.cc): the executor's host; the end of an
  // actor that exits on purpose (io thread).
  class ExecutorHost;  // executor_host.h
  void ExitProcessWhenFlushed();
  static void SetGpuIds(proto::TaskSpec::Builder spec, const std::vector<int>& ids);

  // actors, owner side (io thread; see actor_owner.cc): the manager is
  // actor_owner_, its runtime half actor_host_.
  void CreateActorOwner();
  void SendKillActor(Connection& conn, const ObjectId& id, bool no_restart);
  // `node` was declared dead: the links of our actors there close; returns
  // our calls' channels to those actors, for the caller to close.
  std::vector<std::shared_ptr<Connection>> OnActorNodeDead(const NodeId& node,
                                                           const absl::Status& why);
  // actors, caller side (io thread; see actor_caller.cc)
  void CreateActorCaller();
  void CloseActorChannels();
  // Our open channel to `actor` (at `address`, unless empty), or null.
  std::shared_ptr<Connection> ActorChannelTo(const ObjectId& actor, const std::string& address);
  // Answers actor_submitter_->OnLocated: asks the owner (ourselves, a peer, or
  // the head for a detached actor whose owner is gone).
  void LocateActor(const ObjectId& id, const std::string& owner,
                   const std::string& failed_address);
  // The address the head recorded for a detached actor, or "" (async).
  void LookUpDetachedActor(const ObjectId& id, std::function<void(std::string address)> done);
  void OnActorOwnerUnreachable(const ObjectId& id, std::string failed_address, std::string why);
  void OnActorChannelLost(const ObjectId& id, uint64_t channel);
  void OnActorTaskReply(const ObjectId& id, proto::TaskReply::Reader reply);
  void FillTaskSpec(proto::TaskSpec::Builder spec, const PendingTask& task);

  CoreWorkerOptions options_;
  NodeId node_id_;
  std::string listen_address_;
  // The same, shared by the RefHandles of the objects this process owns.
  std::shared_ptr<const std::string> shared_listen_address_;
  std::string exe_path_;
  boost::asio::io_context io_;
  // Posts to the io thread; refuses once Stop has begun (PostToIo).
  std::unique_ptr<IoPoster> poster_;
  std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> work_;
  std::thread io_thread_;
  std::string node_address_;  // our node daemon's address (TCP and Unix)
  std::shared_ptr<Connection> node_conn_;
  // Sends our task events to the node daemon (io thread; goes before io_).
  std::unique_ptr<TaskEventFlusher> event_flusher_;
  // Worker: marks its stdout/stderr with the running task's name (executor threads).
  std::unique_ptr<OutputTagger> output_tagger_;
  const uint64_t generation_;
  // Requests to the head from the io thread (asynchronous, with a deadline).
  std::unique_ptr<HeadRequester> head_;
  // Create/seal/abort/get/pull/delete in the node's store, and the pins of
  // the views it hands out (thread-safe). Made by Connect (it needs the
  // store's segment); goes after the object tracking, whose frees it serves.
  std::unique_ptr<StoreProvider> store_provider_;
  // Get and Wait: memory store -> owner -> pull, other copies (blocking,
  // thread-safe; its owner requests on the io thread). Made by Connect.
  std::unique_ptr<ObjectGetter> object_getter_;
  // A reader's report of a copy it could not read, and the owner's answer
  // (lost_copies.h). Made by Connect.
  std::unique_ptr<LostCopies> lost_copies_;
  // What this process knows of each object it owns or borrows (thread-safe,
  // one lock), and the two parts that read and change it. Declared early so
  // they go last: references dropped while the rest is destroyed find them.
  std::unique_ptr<ObjectTable> object_table_;
  std::unique_ptr<ReferenceCounter> refs_;
  std::unique_ptr<MemoryStore> memory_store_;
  std::atomic<bool> stopped_{false};
  std::atomic<bool> node_lost_{false};

  // io thread only (checked by io_checker_ in debug builds at the io entry
  // points: frames from the node and from peers, submissions, actor lookups)
  ThreadChecker io_checker_;
  // The connections we open (to node daemons, to other owners' services)
  // and the requests awaiting replies on them (outbound_connections.h); its
  // host is our half. Made by Connect (it needs the node's identity).
  std::unique_ptr<ConnectionsHost> connections_host_;
  std::unique_ptr<OutboundConnections> connections_;
  // Leases for tasks and actors (lease_requester.h) over our node connections.
  std::unique_ptr<NodeLeaseTransport> lease_transport_;
  std::unique_ptr<LeaseRequester> lease_requester_;
  // The owner service (owner_service.h): our listeners, the connections
  // peers opened to us and their frames; its host is our half. Made by
  // Connect (it needs the worker id); goes before the maps its callbacks use.
  std::unique_ptr<ServiceHost> service_host_;
  std::unique_ptr<OwnerService> owner_service_;

  // Owner side of actors: the actors this process created (lumen/actors) and
  // the runtime half it asks (io thread only). The host outlives the manager.
  std::unique_ptr<ActorHost> actor_host_;
  std::unique_ptr<actors::ActorOwner> actor_owner_;
  // Records of ended normal tasks for SubmitTask to reuse (thread-safe;
  // declared before tasks_, which hands them back, so it outlives it).
  std::unique_ptr<PendingTaskPool> task_pool_;
  // How submitted tasks end: complete, fail, retry budget, history (io thread).
  std::unique_ptr<TaskManager> tasks_;
  // The lineage of stored task results, and their rebuild when every copy
  // is lost (io thread).
  std::unique_ptr<ObjectRecovery> recovery_;
  // Holds submitted tasks until their arguments are ready (io thread).
  std::unique_ptr<DependencyResolver> resolver_;
  // Normal tasks whose arguments are ready: queues per shape, leases,
  // pipelining, lost workers and dead nodes (io thread), over our connections.
  std::unique_ptr<SubmitterTransport> submitter_transport_;
  std::unique_ptr<NormalTaskSubmitter> submitter_;
  // Tasks cancelled while their arguments were being resolved: they fail
  // with TaskCancelledError when resolved instead of being submitted (io
  // thread only). An id whose task is no normal task of ours (an actor call,
  // one that already failed) stays until shutdown: one per such Cancel call.
  absl::flat_hash_set<TaskId> cancelled_unresolved_;
  // Caller side of actors: the ordered submitter (lumen/actors) and the
  // transport it sends through (io thread only). Declared after the maps the
  // transport's callbacks use.
  std::unique_ptr<ActorCaller> actor_caller_;
  std::unique_ptr<actors::ActorTaskSubmitter> actor_submitter_;

  // worker mode, actor process: who it is and how to reach its owner
  ObjectId actor_id_;       // io thread, set by the creation task
  std::string actor_name_;  // io thread
  std::weak_ptr<Connection> actor_owner_conn_;  // io thread

  // Submitted tasks on their way to the io thread, which takes them in
  // bounded chunks (thread-safe).
  std::unique_ptr<SubmissionQueue> submissions_;

  // worker mode: tasks waiting for the executor threads, handed back while
  // the running task blocks (thread-safe; io thread and executor threads)
  std::unique_ptr<TaskReceiver> receiver_;
  // worker mode: runs what receiver_ queued on executor threads, through its
  // host. Made by Connect (it needs the node's identity); goes first.
  std::unique_ptr<ExecutorHost> executor_host_;
  std::unique_ptr<TaskExecutor> executor_;
};

// The process-wide runtime (null before Init and after Shutdown). Thread-safe;
// the returned pointer keeps it alive (stopped, maybe) for as long as it is held.
std::shared_ptr<CoreWorker> CurrentCoreWorker();
void SetCurrentCoreWorker(std::shared_ptr<CoreWorker> worker);

}  // namespace lumen::runtime
