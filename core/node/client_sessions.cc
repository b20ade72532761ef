// ClientSessions: see client_sessions.h. Runs on the node daemon's io thread.
#include "core/node/client_sessions.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "lumen/common/logging.h"
#include "lumen/common/post.h"
#include "lumen/common/proto_util.h"

namespace lumen::node {

void ClientSessions::OnFirstFrame(Connection& conn, proto::Envelope::Reader msg) {
  if (!msg.isHello()) {
    conn.Close(absl::PermissionDeniedError("first frame was not a hello"));
    return;
  }
  OnHello(conn, msg.getHello());
}

void ClientSessions::RefuseHello(Connection& conn, const absl::Status& why) {
  // Tell the peer why, with one non-blocking send (a fresh socket takes it).
  OutMessage out;
  auto reply = out.Init().initHelloReply();
  reply.setOk(false);
  reply.setError(std::string(why.message()));
  std::string frame;
  AppendFrame(out.builder(), &frame);
  if (!conn.TrySendNow(frame)) LUMEN_LOG(DEBUG) << "hello refusal not sent to " << conn.peer();
  conn.Close(why);
}

void ClientSessions::OnHello(Connection& conn, proto::Hello::Reader hello) {
  Client& client = ClientRegistry::Info(conn);
  OutMessage out;
  auto reply = out.Init().initHelloReply();
  if (absl::Status s = o_.clients->CheckHello(hello); !s.ok()) {
    if (s.code() == absl::StatusCode::kFailedPrecondition) {
      RefuseHello(conn, absl::FailedPreconditionError(s.message()));
    } else {
      conn.Close(s);  // auth: nothing is told to an unauthenticated peer
    }
    return;
  }
  client.role = hello.getRole();
  client.job = IdFrom<JobId>(hello.getJobId());
  client.worker = IdFrom<WorkerId>(hello.getWorkerId());
  client.is_driver = hello.getIsDriver();
  if (client.role == proto::Role::REMOTE_OWNER) {
    if (o_.cluster->IsEndedJob(client.job)) {
      RefuseHello(conn, absl::FailedPreconditionError("this job has ended"));
      return;
    }
    // Its objects here are recorded under a key that outlives this connection.
    absl::StatusOr<uint64_t> key = o_.remote_owners->OnHello(
        client.worker, StringOf(hello.getNodeId()), client.job, hello.getListenAddress().cStr(),
        client.is_driver, conn.id());
    if (!key.ok()) {
      RefuseHello(conn, key.status());
      return;
    }
    client.owner_key = *key;
    // A job whose driver runs elsewhere: its workers here run the same binary.
    bool inserted = false;
    Job& job = o_.pool->GetOrAddJob(client.job, &inserted);
    if (inserted) job.remote = true;
    if (job.exe_path.empty()) job.exe_path = hello.getExePath().cStr();
    if (client.is_driver) o_.worker_logs->SetDriver(client.job, conn.id(), hello.getLogToDriver());
  } else {
    client.owner_key = conn.id();
  }
  if (client.role == proto::Role::WORKER) {
    if (auto s = o_.pool->OnWorkerHello(client.worker, conn.id(), hello.getListenAddress().cStr());
        !s.ok()) {
      conn.Close(s);
      return;
    }
  } else if (client.role == proto::Role::DRIVER) {
    bool inserted = false;
    Job& job = o_.pool->GetOrAddJob(client.job, &inserted);
    if (!inserted && job.driver_conn != 0) {
      conn.Close(absl::AlreadyExistsError("a driver for this job is already connected"));
      return;
    }
    job.exe_path = hello.getExePath().cStr();
    job.driver_conn = conn.id();
    o_.worker_logs->SetDriver(client.job, conn.id(), hello.getLogToDriver());
  }
  client.hello_done = true;
  conn.AcceptHello();
  reply.setOk(true);
  reply.setNodeId(DataOf(o_.node_id));
  // Drivers and workers retry head calls through a head restart only when
  // its tables survive it (doc/reliability.md, item 6).
  reply.setHeadPersistent(o_.head != nullptr && o_.head->head_persistent());
  reply.setStoreSize(o_.store->segment().size());
  reply.setSessionDir(o_.session_dir);
  reply.setJobId(DataOf(client.job));
  reply.setNodeHost(o_.host);
  reply.setNodeAddress(o_.address);
  if (client.local()) {
    // The store's fd travels with the hello reply (SCM_RIGHTS).
    std::string frame;
    AppendFrame(out.builder(), &frame);
    auto s = ClientRegistry::SendWithFdNow(conn, frame, o_.store->segment().fd());
    if (!s.ok()) {
      conn.Close(s);
      return;
    }
  } else {
    conn.Send(out.builder());
  }
  if (client.role == proto::Role::WORKER) {
    o_.leases->Dispatch();
  } else if (client.role == proto::Role::DRIVER) {
    // Prestart a pool for the new job.
    o_.pool->GetOrAddJob(client.job).remote = false;
    for (int i = 0; i < o_.pool->pool_size(); ++i) {
      std::string why;
      if (!o_.pool->StartWorker(client.job, &why)) {
        lumen::Post(*o_.io, "node.fail_job_leases", [this, job = client.job, why] {
          if (o_.pool->FindJob(job) != nullptr) o_.leases->FailJobRequests(job, why);
        });
      }
    }
  }
}

void ClientSessions::OnClose(Connection& conn, const absl::Status& why) {
  uint64_t id = conn.id();
  Client client = ClientRegistry::Info(conn);
  // A worker this daemon killed (SIGKILL: an actor's owner let it go) may die
  // in the middle of a frame (a task-event flush): that is the kill, not a
  // misbehaving peer.
  const Worker* killed = client.role == proto::Role::WORKER ? o_.pool->Find(client.worker) : nullptr;
  if (!why.ok() && why.code() != absl::StatusCode::kUnavailable &&
      why.code() != absl::StatusCode::kCancelled &&
      (killed == nullptr || killed->kill_reason.empty())) {
    LogRejectedConnection("node daemon", conn.peer(), why);
  }
  o_.store->DisconnectClient(id);
  // A local owner that closed its connection died or ended: its objects go
  // (O(objects in the store), so only for clients that can own objects). A
  // remote owner's link may only have failed: its objects stay until it is
  // known dead (RemoteOwners, then OnRemoteOwnerGone).
  if (client.role == proto::Role::DRIVER || client.role == proto::Role::WORKER) {
    o_.store->OwnerGone(client.owner_key);
  } else if (client.role == proto::Role::REMOTE_OWNER && client.hello_done) {
    o_.remote_owners->OnClosed(id);
  }
  o_.worker_logs->OnConnectionClosed(id);
  o_.clients->Remove(id);
  o_.leases->OnClientClosed(id);
  Job* job = o_.pool->FindJob(client.job);
  if (client.role == proto::Role::DRIVER && job != nullptr && job->driver_conn == id) {
    // The job is over, here and (through the head) on every node.
    EndJob(client.job);
    if (o_.head != nullptr) o_.head->SendJobEnded(client.job);
  } else if (client.role == proto::Role::WORKER) {
    o_.pool->DropFromIdle(client.worker);
    Worker* w = o_.pool->Find(client.worker);
    if (w != nullptr && o_.launcher->IsAlive(w->pid)) {
      o_.pool->Kill(client.worker, "its connection to the node daemon closed");
    }
  }
  o_.leases->Dispatch();
}

void ClientSessions::OnRemoteOwnerGone(const RemoteOwners::Gone& gone) {
  o_.store->OwnerGone(gone.key);
  // Still connected (its node was declared dead while its link stays up):
  // nothing more may be recorded under the freed key.
  if (Connection* conn = gone.conn != 0 ? o_.clients->Find(gone.conn) : nullptr) {
    conn->Close(absl::UnavailableError(absl::StrCat("remote owner gone: ", gone.why)));
  }
  if (gone.is_driver) {
    EndJob(gone.job);
    o_.leases->Dispatch();
  }
}

void ClientSessions::EndJob(const JobId& job_id) {
  o_.cluster->MarkJobEnded(job_id);
  o_.remote_owners->EndJob(job_id);
  if (o_.pool->FindJob(job_id) == nullptr) return;
  // Its workers and its objects go with it, except detached actors, which keep
  // the job's entry (its binary) for their own work.
  auto detached = [this](const Worker& w) { return o_.leases->IsDetached(w); };
  o_.pool->KillJobWorkers(job_id, detached);
  bool has_detached = false;
  for (const auto& [wid, w] : o_.pool->workers()) has_detached |= w.job == job_id && detached(w);
  if (has_detached) {
    Job* job = o_.pool->FindJob(job_id);
    job->driver_conn = 0;
    job->idle.clear();
  } else {
    o_.pool->EraseJob(job_id);
  }
  o_.store->EndJob(job_id);
}

}  // namespace lumen::node
