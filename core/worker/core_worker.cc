// CoreWorker, the composition root: startup (the handshake with the node
// daemon, the listeners), shutdown, and the dispatch of node-daemon frames.
#include "lumen/worker/core_worker.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <typeinfo>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "core/worker/actor_caller.h"
#include "core/worker/actor_host.h"
#include "core/worker/actor_names.h"
#include "core/worker/head_requester.h"
#include "core/worker/io_poster.h"
#include "core/worker/lost_copies.h"
#include "core/worker/outbound_connections.h"
#include "core/worker/owner_service.h"
#include "core/worker/dependency_resolver.h"
#include "core/worker/executor_host.h"
#include "core/worker/normal_task_submitter.h"
#include "core/worker/object_getter.h"
#include "core/worker/object_recovery.h"
#include "core/worker/output_tagger.h"
#include "core/worker/pending_task_pool.h"
#include "core/worker/store_provider.h"
#include "core/worker/submission_queue.h"
#include "core/worker/task_event_flusher.h"
#include "core/worker/task_manager.h"
#include "core/worker/worker_log_printer.h"
#include "core/worker/worker_state.h"
#include "lumen/common/codec.h"
#include "lumen/common/head_client.h"
#include "lumen/common/logging.h"
#include "lumen/common/post.h"
#include "lumen/common/process.h"
#include "lumen/common/proto_util.h"
#include "lumen/common/task_events.h"
#include "lumen/objectstore/fd_passing.h"
#include "lumen/objectstore/object_table.h"

namespace lumen::runtime {
namespace {

// The process's runtime. Shared: a user thread in a call (or an ObjectRef
// destructor) keeps it alive while Shutdown stops and drops it.
std::atomic<std::shared_ptr<CoreWorker>> current_core_worker;

// LUMEN_SUBMIT_CHUNK (default SubmissionQueue::kDefaultChunk; 0: no bound):
// the most submitted tasks the io thread takes in one turn. Read once per
// process.
size_t SubmissionChunk() {
  static const size_t chunk = [] {
    const char* v = std::getenv("LUMEN_SUBMIT_CHUNK");
    if (v == nullptr) return SubmissionQueue::kDefaultChunk;
    const long n = std::atol(v);
    return n <= 0 ? std::numeric_limits<size_t>::max() : static_cast<size_t>(n);
  }();
  return chunk;
}

uint64_t NextGeneration() {
  static std::atomic<uint64_t> last{0};
  return last.fetch_add(1, std::memory_order_relaxed) + 1;
}

}  // namespace

std::shared_ptr<CoreWorker> CurrentCoreWorker() {
  return current_core_worker.load(std::memory_order_acquire);
}
void SetCurrentCoreWorker(std::shared_ptr<CoreWorker> worker) {
  current_core_worker.store(std::move(worker), std::memory_order_release);
}

CoreWorker::CoreWorker(CoreWorkerOptions options)
    : options_(std::move(options)),
      poster_(std::make_unique<IoPoster>(io_)),
      generation_(NextGeneration()),
      head_(std::make_unique<HeadRequester>(
          io_, HeadRequester::Options{options_.head_address, options_.timeouts.head_call_timeout})) {
  receiver_ = std::make_unique<TaskReceiver>();
  submissions_ = std::make_unique<SubmissionQueue>(SubmissionChunk());
  CreateObjectTracking();
  lease_transport_ = std::make_unique<NodeLeaseTransport>(*this);
  lease_requester_ = std::make_unique<LeaseRequester>(
      *lease_transport_, LeaseRequester::Options{options_.timeouts.lease_retry_delay,
                                                 options_.timeouts.spillback_retry_delay});
  submitter_transport_ = std::make_unique<SubmitterTransport>(*this);
  submitter_ = std::make_unique<NormalTaskSubmitter>(
      *lease_requester_, *tasks_, *submitter_transport_,
      NormalTaskSubmitter::Options{options_.max_tasks_in_flight_per_worker,
                                   options_.max_pending_lease_requests,
                                   options_.timeouts.lease_idle_timeout});
  CreateActorOwner();
  CreateActorCaller();
}

void CoreWorker::CreateObjectTracking() {
  object_table_ = std::make_unique<ObjectTable>();
  refs_ = std::make_unique<ReferenceCounter>(
      *object_table_,
      ReferenceCounter::Callbacks{
          .on_freed =
              [this](ReferenceCounter::Freed freed) {
                if (freed.stored) {
                  if (store_provider_) {
                    store_provider_->DeleteCopies(freed.id, std::move(freed.copies));
                  }
                  // Its lineage (if any) goes with it, releasing its task's arguments.
                  PostToIo("worker.forget_lineage",
                           [this, id = freed.id] { recovery_->Forget(id); });
                }
                if (freed.is_actor && !stopped_) {
                  // No handle to the actor is left anywhere: it ends (unless detached).
                  PostToIo("worker.actor_out_of_scope", [this, id = freed.id] { actor_owner_->OnOutOfScope(id); });
                }
              },
          .send_borrower_change =
              [this](const ObjectId& id, const std::string& owner, bool add) {
                SendBorrowerChange(id, owner, add);
              },
          .send_escape = [this](const ObjectId& id,
                                const std::string& owner) { SendEscapeRef(id, owner); },
      });
  memory_store_ = std::make_unique<MemoryStore>(
      *object_table_,
      MemoryStore::Callbacks{
          .run_on_ready =
              [this](const ObjectId& id, std::vector<std::function<void()>> callbacks) {
                PostToIo("worker.run_on_ready_callbacks", [this, id, callbacks = std::move(callbacks)] {
                  for (auto& cb : callbacks) cb();
                  refs_->MaybeFree(id);
                });
              },
          .delete_orphan_copies =
              [this](const ObjectId& id, std::vector<std::string> copies) {
                if (store_provider_) store_provider_->DeleteCopies(id, std::move(copies));
              },
          .request_from_owner =
              [this](const ObjectId& id, const std::string& owner) {
                PostToIo("worker.request_object_from_owner", [this, id, owner] {
                  object_getter_->RequestObjectFromOwner(id, owner);
                });
              },
          .notify_blocked = [this](bool blocked) { NotifyBlocked(blocked); },
          .spin_before_blocking = [this] { return BlockingTellsNode(); },
      });
  task_pool_ = std::make_unique<PendingTaskPool>();
  tasks_ = std::make_unique<TaskManager>(*memory_store_);
  tasks_->SetRecordPool(task_pool_.get());
  recovery_ = std::make_unique<ObjectRecovery>(
      *object_table_, *tasks_, ObjectRecovery::Options::FromEnv(),
      ObjectRecovery::Callbacks{
          .resubmit =
              [this](std::unique_ptr<PendingTask> task) {
                task->submitted_tick = TaskEvents().Record(TaskEventKind::kSubmitted, task->task_id,
                                                           task->attempt, task->name(),
                                                           {.start = &task->submitted_mark});
                // Owned by the resolver's callbacks until its arguments are ready.
                resolver_->Resolve(task.release());
              },
      });
  tasks_->SetLineageSink(
      [this](std::unique_ptr<PendingTask> task) { recovery_->KeepLineage(std::move(task)); });
  resolver_ = std::make_unique<DependencyResolver>(
      *object_table_,
      DependencyResolver::Callbacks{
          .request_from_owner =
              [this](const ObjectId& id, const std::string& owner) {
                object_getter_->RequestObjectFromOwner(id, owner);
              },
          .on_resolved = [this](PendingTask* task) { OnTaskResolved(task); },
      });
}

ObjectEntry* CoreWorker::AddLocalRef(const ObjectId& id, const std::string& owner,
                                     bool decoded) {
  return refs_->AddLocalRef(id, owner, decoded);
}

void CoreWorker::RemoveLocalRef(const ObjectId& id) { refs_->RemoveLocalRef(id); }

void CoreWorker::MarkEscaped(const ObjectId& id) { refs_->MarkEscaped(id); }

absl::StatusOr<std::unique_ptr<CoreWorker>> CoreWorker::Start(CoreWorkerOptions options) {
  std::unique_ptr<CoreWorker> worker(new CoreWorker(std::move(options)));
  if (worker->options_.worker_id.IsNil()) worker->options_.worker_id = WorkerId::Random();
  if (worker->options_.job_id.IsNil()) worker->options_.job_id = JobId::Random();
  if (auto s = worker->Connect(); !s.ok()) return s;
  return worker;
}

absl::Status CoreWorker::Connect() {
  exe_path_ = SelfExecutablePath();
  // The owner service: peers push tasks here (worker) and ask for objects.
  service_host_ = std::make_unique<ServiceHost>(*this);
  owner_service_ = std::make_unique<OwnerService>(
      io_, *object_table_, *refs_, *receiver_, *actor_owner_, *service_host_,
      OwnerService::Options{.node_host = options_.node_host,
                            .session_dir = options_.session_dir,
                            .is_worker = options_.is_worker,
                            .worker_id = options_.worker_id});
  auto listening = owner_service_->Listen();
  if (!listening.ok()) return listening.status();
  listen_address_ = *std::move(listening);
  shared_listen_address_ = std::make_shared<const std::string>(listen_address_);
  refs_->SetSelfAddress(listen_address_);

  // Handshake with the node daemon (blocking): its reply carries the store's fd.
  // Start-up code on the thread that called Start, before the io thread runs
  // (it starts at the end of Connect): no event loop waits behind these
  // blocking writes and reads.
  boost::asio::local::stream_protocol::socket node_socket(io_);
  boost::system::error_code ec;
  node_socket.connect(boost::asio::local::stream_protocol::endpoint(options_.node_socket), ec);
  if (ec) {
    return absl::UnavailableError(absl::StrCat("cannot connect to the node daemon at ",
                                               options_.node_socket, ": ", ec.message()));
  }
  {
    OutMessage out;
    auto hello =
        InitHello(out.Init(), options_.is_worker ? proto::Role::WORKER : proto::Role::DRIVER);
    hello.setWorkerId(DataOf(options_.worker_id));
    hello.setJobId(DataOf(options_.job_id));
    hello.setExePath(exe_path_);
    hello.setListenAddress(listen_address_);
    hello.setLogToDriver(!options_.is_worker && options_.log_to_driver);
    if (auto s = WriteFrameBlocking(node_socket.native_handle(), out.builder()); !s.ok()) return s;
  }
  std::vector<capnp::word> reply_words(512);
  size_t received = 0;
  auto fd = objectstore::RecvWithFd(node_socket.native_handle(), reply_words.data(),
                                    reply_words.size() * sizeof(capnp::word), &received);
  if (!fd.ok()) {
    // A refusal (e.g. a protocol version mismatch) comes without the store's fd:
    // show the daemon's reason when there is one.
    if (received > kFrameHeaderBytes) {
      try {
        capnp::FlatArrayMessageReader reader(kj::arrayPtr(
            reply_words.data() + 1, (received - kFrameHeaderBytes) / sizeof(capnp::word)));
        auto reply = reader.getRoot<proto::Envelope>();
        if (reply.isHelloReply() && !reply.getHelloReply().getOk()) {
          return absl::UnavailableError(absl::StrCat(
              "node daemon refused: ", reply.getHelloReply().getError().cStr()));
        }
      } catch (const std::exception&) {
      }
    }
    return absl::UnavailableError(
        absl::StrCat("node daemon handshake failed: ", fd.status().message()));
  }
  if (received < kFrameHeaderBytes) {
    ::close(*fd);
    return absl::UnavailableError("short handshake reply");
  }
  auto len = ParseFrameHeader(reinterpret_cast<const uint8_t*>(reply_words.data()), 1 << 20);
  if (!len.ok() || kFrameHeaderBytes + *len != received) {
    ::close(*fd);
    return absl::UnavailableError("malformed handshake reply from the node daemon");
  }
  uint64_t store_size = 0;
  try {
    capnp::FlatArrayMessageReader reader(
        kj::arrayPtr(reply_words.data() + 1, *len / sizeof(capnp::word)));
    auto reply = reader.getRoot<proto::Envelope>();
    if (!reply.isHelloReply()) {
      ::close(*fd);
      return absl::UnavailableError("bad handshake reply: expected a hello reply");
    }
    auto hr = reply.getHelloReply();
    if (!hr.getOk()) {
      ::close(*fd);
      return absl::UnavailableError(absl::StrCat("node daemon refused: ", hr.getError().cStr()));
    }
    auto nid = hr.getNodeId();
    node_id_ = IdFrom<NodeId>(nid);
    store_size = hr.getStoreSize();
    node_address_ = hr.getNodeAddress().cStr();
    // Head calls ride out a head restart when its tables survive it.
    SetHeadReconnect({.give_up_after = options_.timeouts.head_reconnect_timeout,
                      .initial = options_.timeouts.head_retry_period,
                      .max = options_.timeouts.head_retry_max_period,
                      .head_persistent = hr.getHeadPersistent()});
    SetCallTimeouts(options_.timeouts);  // CallHead's limits in this process
  } catch (const std::exception& e) {
    ::close(*fd);
    return absl::UnavailableError(absl::StrCat("bad handshake reply: ", e.what()));
  }
  auto segment = objectstore::ShmSegment::Attach(*fd, store_size);
  if (!segment.ok()) return segment.status();
  executor_host_ = std::make_unique<ExecutorHost>(*this);
  executor_ = std::make_unique<TaskExecutor>(
      *executor_host_, *receiver_,
      TaskExecutor::Options{.node_id = node_id_,
                            .node_address = node_address_,
                            .worker_id = options_.worker_id,
                            .exe_path = exe_path_,
                            .inline_limit = options_.inline_limit});

  int raw = node_socket.release();
  Socket generic(io_, boost::asio::generic::stream_protocol(AF_UNIX, 0), raw);
  node_conn_ = Connection::Create(std::move(generic));
  connections_host_ = std::make_unique<ConnectionsHost>(*this);
  connections_ = std::make_unique<OutboundConnections>(
      io_, *connections_host_,
      OutboundConnections::Options{
          .session_dir = options_.session_dir,
          .connect_timeout = options_.timeouts.connect_timeout,
          .node_address = node_address_,
          .worker_id = options_.worker_id,
          .job_id = options_.job_id,
          .node_id = node_id_,
          .exe_path = exe_path_,
          .listen_address = listen_address_,
          .is_driver = !options_.is_worker,
          .log_to_driver = !options_.is_worker && options_.log_to_driver},
      node_conn_);
  store_provider_ = std::make_unique<StoreProvider>(
      *poster_, *connections_, node_conn_, *std::move(segment),
      StoreProvider::Options{.job_id = options_.job_id});
  lost_copies_ = std::make_unique<LostCopies>(
      *object_table_, *recovery_, *connections_, *poster_,
      LostCopies::Options{.listen_address = listen_address_},
      [this] { return stopped_ || node_lost_; });
  object_getter_ = std::make_unique<ObjectGetter>(
      *object_table_, *memory_store_, *store_provider_, *connections_, *poster_,
      ObjectGetter::Options{.node_id = node_id_,
                            .node_address = node_address_,
                            .listen_address = listen_address_,
                            .generation = generation_},
      ObjectGetter::Callbacks{
          .flush_held_replies = [this] { FlushHeldReplies(); },
          .recover_from_owner =
              [this](const ObjectId& id, const std::string& owner, const NodeId& node,
                     const std::string& why) {
                return lost_copies_->RecoverFromOwner(id, owner, node, why);
              },
      });
  node_conn_->Start([this](Connection& c, proto::Envelope::Reader m) { OnNodeFrame(c, m); },
                    [this](Connection&, const absl::Status& why) { OnNodeLost(why); });
  output_tagger_ =
      std::make_unique<OutputTagger>(options_.is_worker && OutputTagger::EnabledByEnvironment());
  event_flusher_ = std::make_unique<TaskEventFlusher>(
      io_, TaskEvents(), options_.timeouts.task_event_flush_period, node_conn_);
  // A task running at a flush is recorded by its worker (running_tasks.h).
  if (options_.is_worker) {
    event_flusher_->SetBeforeDrain([this] { executor_->RecordRunningTasks(); });
  }
  lumen::Post(io_, "worker.start_event_flusher", [this] { event_flusher_->Start(); });

  work_.emplace(io_.get_executor());
  io_thread_ = std::thread([this] {
    logging::SetProcessTag(options_.is_worker ? "worker" : "driver");
    io_.run();
  });
  return absl::OkStatus();
}

void CoreWorker::OnNodeLost(const absl::Status& why) {
  node_lost_ = true;
  store_provider_->OnNodeLost();
  if (!stopped_) LUMEN_LOG(DEBUG) << "lost the node daemon: " << why;
  connections_->FailNodeRequests();
  // Nothing will arrive any more: fail whatever is still pending.
  std::vector<ObjectId> waiting;
  {
    ObjectTable::Locked objects(*object_table_);
    for (auto& [id, entry] : *objects)
      if (!entry.ready) waiting.push_back(id);
  }
  for (const auto& id : waiting) {
    memory_store_->SetFailed(id, Failure{proto::FailureKind::OBJECT_LOST, "",
                                "lost the connection to the node daemon", ""});
  }
  receiver_->Stop();  // executor threads blocked in Take return and see node_lost_
}

CoreWorker::~CoreWorker() {
  Stop();
  // The submitters refer to their transports; all go before the maps they use.
  submitter_.reset();
  submitter_transport_.reset();
  actor_submitter_.reset();
  actor_caller_.reset();
  lease_requester_.reset();
  lease_transport_.reset();
}

void CoreWorker::Stop() {
  if (stopped_.load()) return;
  if (!options_.is_worker) FlushToNodes();
  if (stopped_.exchange(true)) return;
  receiver_->Stop();  // executor threads blocked in Take return and see stopped_
  if (store_provider_) store_provider_->Stop();
  std::vector<std::pair<std::string, ObjectId>> names;
  auto shutdown = [this, &names] {
    actor_owner_->ForEach([&names](const actors::OwnedActor& actor) {
      const actors::ActorSpec& spec = *actor.spec;
      if (!spec.name.empty() && !spec.detached && !actor.life.IsDead()) {
        names.emplace_back(spec.name, spec.id);
      }
    });
    owner_service_->StopAccepting();
    connections_->CloseRemoteNodes(absl::CancelledError("shutdown"));
    if (event_flusher_) event_flusher_->FlushBeforeClose();
    if (node_conn_) node_conn_->Close(absl::CancelledError("shutdown"));
    submitter_->CloseAll(absl::CancelledError("shutdown"));
    connections_->ClosePeers(absl::CancelledError("shutdown"));
    owner_service_->CloseInbound();
    CloseActorChannels();
    // Requests to the head in flight (a detached actor's address, a name to
    // free) finish first, each within its deadline.
    head_->WhenIdle([this] {
      // Whoever still waits for a node daemon gets "no reply", not silence.
      connections_->FailNodeRequests();
      work_.reset();
      io_.stop();
    });
  };
  // Nothing posted after this handler would run: refuse it (PostToIo).
  const bool posted = io_thread_.joinable();
  poster_->Close("worker.shutdown", shutdown, posted);
  if (posted) io_thread_.join();
  if (owner_service_) ::unlink(owner_service_->unix_path().c_str());
  // Our actors (but detached ones) end with us: free their names (blocking:
  // this is the thread that called Stop, never the io thread).
  for (const auto& name_and_id : names) {
    const std::string& name = name_and_id.first;  // not a structured binding:
    const ObjectId& id = name_and_id.second;       // clang 14 cannot capture one
    auto reply = CallHead(
        options_.head_address,
        [&](proto::Envelope::Builder env) {
          FillActorName(env.initUnregisterActorName(), name, id);
        },
        options_.timeouts.head_call_timeout);
    if (!reply.ok()) {
      LUMEN_LOG(WARNING) << "cannot free actor name '" << name << "': " << reply.status();
    }
  }
  // Drop queued work (its refs) while the maps are still consistent.
  submitter_->Clear();
  recovery_->Clear();
  submissions_->TakeAll();
}

bool CoreWorker::PostToIo(const char* name, std::function<void()> fn) {
  return poster_->Post(name, std::move(fn));
}

void CoreWorker::OnNodeFrame(Connection& conn, proto::Envelope::Reader msg) {
  io_checker_.Check("CoreWorker::OnNodeFrame");
  if (msg.isReclaimLeases()) {
    submitter_->OnReclaimLeases();
    return;
  }
  if (msg.isListState()) {
    SendStateRows(conn, msg.getRequestId(), msg.getListState().cStr());
    return;
  }
  if (msg.isMarkNodeDead()) {
    OnRemoteNodeDead(IdFrom<NodeId>(msg.getMarkNodeDead()));
    return;
  }
  if (msg.isGetTaskEvents()) {
    // Our node asks for our task events now: a driver of our job is stopping.
    if (event_flusher_ && &conn == node_conn_.get()) event_flusher_->AnswerFlush(msg.getRequestId());
    return;
  }
  if (msg.isWorkerLogs() && msg.getRequestId() == 0) {
    WorkerLogPrinter().Print(msg.getWorkerLogs());
    return;
  }
  if (!connections_->TakeNodeReply(msg)) {
    LUMEN_LOG(DEBUG) << "unexpected frame from the node daemon (request " << msg.getRequestId()
                     << ")";
  }
}

}  // namespace lumen::runtime
