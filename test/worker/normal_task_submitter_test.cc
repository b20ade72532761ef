// Deterministic tests of the NormalTaskSubmitter: the node daemons (behind a
// real LeaseRequester), the leased workers' connections, the timers and the
// posted handlers are fakes that hold every callback until the test delivers
// it; a real TaskManager and MemoryStore over a table. No processes, no sockets.
#include "core/worker/normal_task_submitter.h"

#include "lumen/common/proto_util.h"

#include <capnp/message.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace lumen::runtime {
namespace {

using std::chrono::milliseconds;

// The node daemons, faked as in lease_requester_test: each lease request is
// held until the test answers it (Reply) or kills its node (Kill: held requests
// hear "the node went away"); retry timers run when the test calls RunTimers.
class FakeNodes : public LeaseTransport {
 public:
  bool LocalNodeConnected() override { return !dead.contains(""); }
  void SendLeaseRequest(const std::string& target, const LeaseShape& shape, bool,
                        std::function<bool(proto::Envelope::Reader)> on_reply,
                        SentCallback on_sent) override {
    requested.push_back(shape.resources);
    if (dead.contains(target)) {
      on_sent(absl::UnavailableError("connection refused"));
      return;
    }
    held[target].push_back(std::move(on_reply));
    on_sent(std::shared_ptr<Connection>());
  }
  void OnSpillback(const std::string&, const NodeId&) override {}
  // The resources of each lease request sent, in order.
  std::vector<std::map<std::string, double>> requested;
  void After(milliseconds, std::function<void()> fn) override { timers.push_back(std::move(fn)); }

  bool Reply(const std::string& node, const std::function<void(proto::LeaseReply::Builder)>& fill) {
    auto it = held.find(node);
    if (it == held.end() || it->second.empty()) return false;
    capnp::MallocMessageBuilder message;
    auto env = message.initRoot<proto::Envelope>();
    fill(env.initLeaseReply());
    auto on_reply = std::move(it->second.front());
    it->second.pop_front();
    if (on_reply(env.asReader())) it->second.push_front(std::move(on_reply));
    return true;
  }
  void Kill(const std::string& node) {
    dead.insert(node);
    auto requests = std::move(held[node]);
    held.erase(node);
    capnp::MallocMessageBuilder message;
    auto empty = message.initRoot<proto::Envelope>().asReader();
    for (auto& on_reply : requests) on_reply(empty);
  }
  void RunTimers() {
    auto due = std::move(timers);
    timers.clear();
    for (auto& fn : due) fn();
  }
  size_t HeldAt(const std::string& node) const {
    auto it = held.find(node);
    return it == held.end() ? 0 : it->second.size();
  }

  std::set<std::string> dead;
  std::map<std::string, std::deque<std::function<bool(proto::Envelope::Reader)>>> held;
  std::vector<std::function<void()>> timers;
};

// The runtime side: worker connects are held until the test completes them;
// a connected worker records what was pushed to it; a closed one tells the
// submitter at once (as a Connection does); timers run on a manual clock;
// posted handlers run when the test says.
class FakeRuntime : public NormalTaskTransport {
 public:
  struct Channel {
    WorkerHandlers handlers;
    std::vector<TaskId> pushed;
    std::vector<std::vector<int>> gpu_ids;
    bool closed = false;
  };
  struct EndedLease {
    uint64_t lease_id;
    bool kill;
  };

  class Worker : public LeasedWorker {
   public:
    explicit Worker(std::shared_ptr<Channel> channel) : channel_(std::move(channel)) {}
    void Push(const PendingTask& task, const std::vector<int>& gpu_ids) override {
      REQUIRE_FALSE(channel_->closed);
      channel_->pushed.push_back(task.task_id);
      channel_->gpu_ids.push_back(gpu_ids);
    }
    void Close(const absl::Status& why) override {
      if (channel_->closed) return;
      channel_->closed = true;
      channel_->handlers.on_lost(why);
    }

   private:
    std::shared_ptr<Channel> channel_;
  };

  class Timer : public OneShotTimer {
   public:
    explicit Timer(FakeRuntime& runtime) : runtime_(runtime), id_(runtime.next_timer_++) {}
    ~Timer() override { Cancel(); }
    void Arm(milliseconds delay, std::function<void()> fn) override {
      runtime_.timers_[id_] = {runtime_.now_ + delay, std::move(fn)};
    }
    void Cancel() override { runtime_.timers_.erase(id_); }

   private:
    FakeRuntime& runtime_;
    int id_;
  };

  bool LocalNodeConnected() override { return local_connected; }
  void ConnectWorker(const std::string& address, WorkerHandlers handlers,
                     ConnectDone done) override {
    connects.push_back({address, std::move(handlers), std::move(done)});
  }
  void EndLease(const std::shared_ptr<Connection>&, uint64_t lease_id, bool kill) override {
    ended.push_back({lease_id, kill});
  }
  void AskWorkerExitCause(const std::shared_ptr<Connection>&, const WorkerId&,
                          std::function<void(std::string)> done) override {
    exit_cause_asks.push_back(std::move(done));
  }
  std::unique_ptr<OneShotTimer> NewTimer() override { return std::make_unique<Timer>(*this); }
  void Post(const char*, std::function<void()> fn) override { posted.push_back(std::move(fn)); }

  // Completes the oldest held connect to `address`: connected, or refused.
  bool FinishConnect(const std::string& address, bool ok = true) {
    for (auto it = connects.begin(); it != connects.end(); ++it) {
      if (it->address != address) continue;
      auto held = std::move(*it);
      connects.erase(it);
      if (!ok) {
        held.done(absl::UnavailableError("connection refused"));
        return true;
      }
      auto channel = std::make_shared<Channel>();
      channel->handlers = std::move(held.handlers);
      workers[address] = channel;
      held.done(std::make_unique<Worker>(channel));
      return true;
    }
    return false;
  }
  // The worker at `address` answers `task` (ran for `micros`), or hands it
  // back because it blocked in Get.
  void Reply(const std::string& address, const TaskId& task, uint64_t micros = 10,
             bool requeued = false) {
    capnp::MallocMessageBuilder message;
    auto reply = message.initRoot<proto::TaskReply>();
    reply.setTaskId(DataOf(task));
    reply.setExecMicros(micros);
    reply.setRequeued(requeued);
    if (!requeued) reply.initResult().setInline(capnp::Data::Reader(
                       reinterpret_cast<const capnp::byte*>("ok"), 2));
    workers.at(address)->handlers.on_reply(reply.asReader());
  }
  // The worker's process dies: its connection closes.
  void Crash(const std::string& address) {
    auto& channel = *workers.at(address);
    channel.closed = true;
    channel.handlers.on_lost(absl::UnavailableError("connection reset by peer"));
  }
  void RunPosted() {
    while (!posted.empty()) {
      auto fn = std::move(posted.front());
      posted.pop_front();
      fn();
    }
  }
  void Advance(milliseconds by) {
    now_ += by;
    for (;;) {
      auto due = timers_.end();
      for (auto it = timers_.begin(); it != timers_.end(); ++it) {
        if (it->second.first <= now_ && (due == timers_.end() || it->second.first < due->second.first)) {
          due = it;
        }
      }
      if (due == timers_.end()) return;
      auto fn = std::move(due->second.second);
      timers_.erase(due);
      fn();
    }
  }
  const std::vector<TaskId>& PushedTo(const std::string& address) {
    static const std::vector<TaskId> none;
    auto it = workers.find(address);
    return it == workers.end() ? none : it->second->pushed;
  }

  struct HeldConnect {
    std::string address;
    WorkerHandlers handlers;
    ConnectDone done;
  };
  bool local_connected = true;
  std::deque<HeldConnect> connects;
  std::map<std::string, std::shared_ptr<Channel>> workers;  // by address
  std::vector<EndedLease> ended;
  std::vector<std::function<void(std::string)>> exit_cause_asks;
  std::deque<std::function<void()>> posted;

 private:
  milliseconds now_{0};
  int next_timer_ = 0;
  std::map<int, std::pair<milliseconds, std::function<void()>>> timers_;
};

constexpr milliseconds kIdle{200};

struct Rig {
  Rig() = default;
  explicit Rig(NormalTaskSubmitter::Options options)
      : submitter{leases, tasks, runtime, options} {}

  ObjectTable table;
  MemoryStore store{table,
                    {.run_on_ready = [](const ObjectId&, std::vector<std::function<void()>>) {},
                     .delete_orphan_copies = [](const ObjectId&, std::vector<std::string>) {},
                     .request_from_owner = [](const ObjectId&, const std::string&) {},
                     .notify_blocked = [](bool) {}}};
  TaskManager tasks{store};
  FakeNodes nodes;
  LeaseRequester leases{nodes, LeaseRequester::Options{}};
  FakeRuntime runtime;
  NormalTaskSubmitter submitter{leases, tasks, runtime,
                                {.max_tasks_in_flight_per_worker = 4,
                                 .max_pending_lease_requests = 2,
                                 .lease_idle_timeout = kIdle}};
  NodeId node_a = NodeId::Random();
  NodeId node_b = NodeId::Random();

  // Submits a task of the one shape used here; returns its id.
  // `resources` empty: the task asked for none (DefaultTaskResources()).
  TaskId Submit(int max_retries = 0, const std::string& name = "Work",
                std::map<std::string, double> resources = {{"CPU", 1}}) {
    auto task = std::make_unique<PendingTask>();
    task->task_id = TaskId::Random();
    task->return_id = ObjectId::ForTaskReturn(task->task_id, 1);
    task->function = task->display_name = name;
    task->placement = std::make_unique<TaskPlacement>();
    task->placement->resources = std::move(resources);
    task->placement->queue_key = "CPU:1";
    task->max_retries = task->retries_left = max_retries;
    {
      ObjectTable::Locked objects(table);
      ObjectEntry& e = (*objects)[task->return_id];  // the caller's ObjectRef
      e.owned = true;
      e.local_refs = 1;
    }
    TaskId id = task->task_id;
    attempts[id] = task.get();
    submitter.Submit(std::move(task));
    return id;
  }
  // The daemon at `at` grants lease `lease_id` on `node`, worker at `worker`.
  bool Grant(const std::string& at, const NodeId& node, uint64_t lease_id,
             const std::string& worker) {
    return nodes.Reply(at, [&](proto::LeaseReply::Builder r) {
      r.setGranted(true);
      r.setLeaseId(lease_id);
      r.setNodeId(DataOf(node));
      r.setWorkerAddress(worker);
      r.setWorkerPid(static_cast<int32_t>(lease_id));
    });
  }
  // A lease granted and its worker connected, in one step.
  void GrantAndConnect(const std::string& at, const NodeId& node, uint64_t lease_id,
                       const std::string& worker) {
    REQUIRE(Grant(at, node, lease_id, worker));
    REQUIRE(runtime.FinishConnect(worker));
  }
  const ObjectEntry& Result(const TaskId& id) {
    ObjectTable::Locked objects(table);
    return *objects->find_value(ObjectId::ForTaskReturn(id, 1));  // stable: node_hash_map
  }
  bool Finished(const TaskId& id) {
    const ObjectEntry& e = Result(id);
    return e.ready && e.kind == ObjectEntry::Kind::kInline;
  }
  bool Failed(const TaskId& id) {
    const ObjectEntry& e = Result(id);
    return e.ready && e.kind == ObjectEntry::Kind::kFailed;
  }
  std::map<TaskId, PendingTask*> attempts;  // valid while the submitter holds the task
};

TEST_CASE("a task that asks for no resources leases {CPU: 1}, in the same queue",
          "[worker][submitter]") {
  // Invariant: SubmitTask leaves a task's resources empty when it asked for
  // none (no map per task); the submitter's queue, and so every lease request
  // for it, holds {CPU: 1}, as a task that named {CPU: 1} does (one queue key).
  Rig rig;
  rig.Submit(0, "Work", {});
  REQUIRE(rig.nodes.requested.size() == 1);
  CHECK(rig.nodes.requested[0] == std::map<std::string, double>{{"CPU", 1}});
  CHECK(DefaultTaskResources() == std::map<std::string, double>{{"CPU", 1}});
  rig.Submit(0, "Work", {{"CPU", 1}});  // the same shape: no second request beyond the pipeline's
  for (const auto& resources : rig.nodes.requested) {
    CHECK(resources == std::map<std::string, double>{{"CPU", 1}});
  }
}

TEST_CASE("a lease granted by a node after it died does not run the task there",
          "[worker][submitter]") {
  // Invariant: once a node is declared dead, no task is pushed to a worker
  // there, also when the grant (or the worker's connect) arrives after the
  // news; the lease is ended with kill, the task keeps its retry budget (it
  // never ran) and waits for a lease elsewhere: run there if one is granted,
  // failed with the refusal's error if none can be.
  Rig rig;
  TaskId task = rig.Submit(/*max_retries=*/1);
  REQUIRE(rig.nodes.HeldAt("") == 1);
  // Our node spills the request to node B.
  REQUIRE(rig.nodes.Reply("", [&](proto::LeaseReply::Builder r) {
    r.setSpillbackAddress("b:1");
    r.setSpillbackNode(DataOf(rig.node_b));
  }));
  REQUIRE(rig.nodes.HeldAt("b:1") == 1);

  SECTION("the grant arrives after the death") {
    rig.submitter.OnNodeDead(rig.node_b, absl::UnavailableError("node b was declared dead"));
    REQUIRE(rig.Grant("b:1", rig.node_b, 7, "worker-b"));
    CHECK(rig.runtime.connects.empty());
    REQUIRE(rig.runtime.ended.size() == 1);
    CHECK(rig.runtime.ended[0].lease_id == 7);
    CHECK(rig.runtime.ended[0].kill);
    CHECK(rig.submitter.TEST_NumLeases() == 0);
    // Asked again, from our node.
    REQUIRE(rig.nodes.HeldAt("") == 1);
    SECTION("another node grants it: it runs there, on its first attempt") {
      rig.GrantAndConnect("", rig.node_a, 8, "worker-a");
      REQUIRE(rig.runtime.PushedTo("worker-a") == std::vector<TaskId>{task});
      CHECK(rig.attempts[task]->attempt == 0);
      rig.runtime.Reply("worker-a", task);
      CHECK(rig.Finished(task));
      CHECK(rig.runtime.PushedTo("worker-b").empty());
    }
    SECTION("no node can run it: it fails with the refusal") {
      REQUIRE(rig.nodes.Reply("", [](proto::LeaseReply::Builder r) {
        r.setGranted(false);
        r.setError("no node has CPU:1");
      }));
      REQUIRE(rig.Failed(task));
      CHECK(rig.Result(task).failure->message == "no node has CPU:1");
    }
  }
  SECTION("the grant arrives before the death, the worker's connect after it") {
    REQUIRE(rig.Grant("b:1", rig.node_b, 7, "worker-b"));
    REQUIRE(rig.runtime.connects.size() == 1);
    CHECK(rig.submitter.OnNodeDead(rig.node_b, absl::UnavailableError("dead")).empty());
    REQUIRE(rig.runtime.FinishConnect("worker-b"));
    CHECK(rig.runtime.PushedTo("worker-b").empty());
    CHECK(rig.runtime.workers.at("worker-b")->closed);
    REQUIRE(rig.runtime.ended.size() == 1);
    CHECK(rig.runtime.ended[0].kill);
    REQUIRE(rig.nodes.HeldAt("") == 1);
    rig.GrantAndConnect("", rig.node_a, 8, "worker-a");
    REQUIRE(rig.runtime.PushedTo("worker-a") == std::vector<TaskId>{task});
    rig.runtime.Reply("worker-a", task);
    CHECK(rig.Finished(task));
  }
}

TEST_CASE("a task running on a node that dies is retried or failed per its budget",
          "[worker][submitter]") {
  // Invariant: a node's death closes the workers leased there; each task they
  // ran is retried elsewhere (attempt + 1) while its budget lasts, and fails
  // with WORKER_CRASHED once it is spent, without asking the dead node why.
  Rig rig;
  TaskId retried = rig.Submit(/*max_retries=*/1, "retried");
  rig.GrantAndConnect("", rig.node_b, 7, "worker-b");
  TaskId doomed = rig.Submit(/*max_retries=*/0, "doomed");
  rig.GrantAndConnect("", rig.node_b, 8, "worker-b2");
  REQUIRE(rig.runtime.PushedTo("worker-b") == std::vector<TaskId>{retried});
  REQUIRE(rig.runtime.PushedTo("worker-b2") == std::vector<TaskId>{doomed});

  rig.submitter.OnNodeDead(rig.node_b, absl::UnavailableError("node b was declared dead"));
  CHECK(rig.runtime.workers.at("worker-b")->closed);
  CHECK(rig.runtime.workers.at("worker-b2")->closed);
  CHECK(rig.runtime.exit_cause_asks.empty());
  REQUIRE(rig.Failed(doomed));
  CHECK(rig.Result(doomed).failure->kind == proto::FailureKind::WORKER_CRASHED);
  CHECK_FALSE(rig.Result(retried).ready);
  REQUIRE(rig.nodes.HeldAt("") == 1);
  rig.GrantAndConnect("", rig.node_a, 9, "worker-a");
  REQUIRE(rig.runtime.PushedTo("worker-a") == std::vector<TaskId>{retried});
  CHECK(rig.attempts[retried]->attempt == 1);
  rig.runtime.Reply("worker-a", retried);
  CHECK(rig.Finished(retried));
}

TEST_CASE("spillback to a node that dies: the task is re-requested elsewhere",
          "[worker][submitter]") {
  // Invariant: a lease request spilled to a node that dies before answering
  // goes back to our node; the task runs once, on the node that grants it,
  // and nothing is ever pushed to the dead node.
  Rig rig;
  TaskId task = rig.Submit();
  REQUIRE(rig.nodes.Reply("", [&](proto::LeaseReply::Builder r) {
    r.setSpillbackAddress("b:1");
    r.setSpillbackNode(DataOf(rig.node_b));
  }));
  REQUIRE(rig.nodes.HeldAt("b:1") == 1);
  rig.submitter.OnNodeDead(rig.node_b, absl::UnavailableError("node b was declared dead"));
  rig.nodes.Kill("b:1");  // its daemon's connection closes: the request is unanswered
  REQUIRE(rig.nodes.HeldAt("") == 1);
  CHECK_FALSE(rig.Grant("b:1", rig.node_b, 7, "worker-b"));
  rig.GrantAndConnect("", rig.node_a, 8, "worker-a");
  REQUIRE(rig.runtime.PushedTo("worker-a") == std::vector<TaskId>{task});
  rig.runtime.Reply("worker-a", task);
  CHECK(rig.Finished(task));
  CHECK(rig.runtime.workers.count("worker-b") == 0);
}

TEST_CASE("short tasks with a backlog are pipelined up to the depth, others go one per worker",
          "[worker][submitter]") {
  // Invariant: a worker holds at most one task until the shape's tasks are
  // known to be short (< 1 ms) and the backlog is deep (>= 32 and > 4 per
  // lease); then at most max_tasks_in_flight_per_worker; lease requests out
  // never exceed max_pending_lease_requests, nor the tasks waiting.
  Rig rig;
  std::vector<TaskId> first{rig.Submit()};
  CHECK(rig.nodes.HeldAt("") == 1);  // one task: one request
  rig.GrantAndConnect("", rig.node_a, 1, "worker-a");
  REQUIRE(rig.runtime.PushedTo("worker-a") == first);
  std::vector<TaskId> backlog;
  for (int i = 0; i < 40; ++i) backlog.push_back(rig.Submit());
  // Not known to be short yet: nothing more goes to the busy worker.
  CHECK(rig.runtime.PushedTo("worker-a").size() == 1);
  CHECK(rig.nodes.HeldAt("") == 2);  // capped by max_pending_lease_requests
  rig.runtime.Reply("worker-a", first[0], /*micros=*/10);
  // Short now, 40 waiting on one lease: four in flight there.
  REQUIRE(rig.runtime.PushedTo("worker-a").size() == 5);
  CHECK(std::vector<TaskId>(rig.runtime.PushedTo("worker-a").begin() + 1,
                            rig.runtime.PushedTo("worker-a").end()) ==
        std::vector<TaskId>(backlog.begin(), backlog.begin() + 4));
  // A second worker takes the next four, in submission order.
  rig.GrantAndConnect("", rig.node_a, 2, "worker-b");
  CHECK(rig.runtime.PushedTo("worker-b") ==
        std::vector<TaskId>(backlog.begin() + 4, backlog.begin() + 8));
  // The backlog's tail stays pipelined: with fewer than 32 ready, a reply
  // still lets the next task go to the worker that has three in flight.
  for (int i = 0; i < 12; ++i) {
    const auto& to_a = rig.runtime.PushedTo("worker-a");
    rig.runtime.Reply("worker-a", to_a[to_a.size() - 4], /*micros=*/10);
  }
  CHECK(rig.runtime.PushedTo("worker-a").size() == 5 + 12);  // 20 ready now
  const size_t before = rig.runtime.PushedTo("worker-a").size();
  rig.runtime.Reply("worker-a", rig.runtime.PushedTo("worker-a")[before - 4], /*micros=*/10);
  CHECK(rig.runtime.PushedTo("worker-a").size() == before + 1);
}

TEST_CASE("the pipelining depth covers about a millisecond of work, between 16 and the most",
          "[worker][submitter]") {
  // Invariant: while a backlog of short tasks pipelines, a worker holds about
  // 1 ms of them (the moving average of their run time), at least 16 and at
  // most max_tasks_in_flight_per_worker: microsecond tasks fill the deepest
  // pipeline, tasks of 100 µs stay at 16.
  for (const auto& [micros, depth] : {std::pair<int64_t, size_t>{2, 48}, {25, 40}, {100, 16}}) {
    INFO("tasks of " << micros << " us");
    Rig rig({.max_tasks_in_flight_per_worker = 48, .max_pending_lease_requests = 1,
             .lease_idle_timeout = kIdle});
    const TaskId first = rig.Submit();
    rig.GrantAndConnect("", rig.node_a, 1, "worker-a");
    REQUIRE(rig.runtime.PushedTo("worker-a") == std::vector<TaskId>{first});
    for (int i = 0; i < 200; ++i) rig.Submit();
    rig.runtime.Reply("worker-a", first, micros);  // the first measure of the shape
    CHECK(rig.runtime.PushedTo("worker-a").size() == 1 + depth);
  }
}

TEST_CASE("a task handed back by a blocked worker runs elsewhere, the blocked worker gets no more",
          "[worker][submitter]") {
  // Invariant: a requeued task is not a failed attempt (attempt unchanged);
  // while its worker still runs a task of ours and blocks, nothing more is
  // pushed to it; once its in-flight tasks are done it is used again.
  Rig rig;
  TaskId blocking = rig.Submit();
  rig.GrantAndConnect("", rig.node_a, 1, "worker-a");
  rig.runtime.Reply("worker-a", blocking, /*micros=*/10);  // short tasks from now on
  std::vector<TaskId> backlog;
  for (int i = 0; i < 40; ++i) backlog.push_back(rig.Submit());
  REQUIRE(rig.runtime.PushedTo("worker-a").size() == 5);  // 1 done + 4 pipelined
  TaskId running = backlog[0];
  TaskId handed_back = backlog[1];
  rig.runtime.Reply("worker-a", handed_back, 0, /*requeued=*/true);
  CHECK(rig.attempts[handed_back]->attempt == 0);
  CHECK(rig.runtime.PushedTo("worker-a").size() == 5);  // blocked: nothing more
  rig.GrantAndConnect("", rig.node_a, 2, "worker-b");
  const auto& to_b = rig.runtime.PushedTo("worker-b");
  REQUIRE_FALSE(to_b.empty());
  // The handed-back task waits at the back of the queue, behind the backlog.
  CHECK(std::find(to_b.begin(), to_b.end(), handed_back) == to_b.end());
  // Still running two of ours and blocked: nothing more goes to it.
  rig.runtime.Reply("worker-a", running);
  rig.runtime.Reply("worker-a", backlog[2]);
  CHECK(rig.runtime.PushedTo("worker-a").size() == 5);
  // Its last in-flight task ends: worker-a is used again.
  rig.runtime.Reply("worker-a", backlog[3]);
  CHECK(rig.runtime.PushedTo("worker-a").size() > 5);
  CHECK(rig.Finished(running));
}

TEST_CASE("an idle lease is kept for the idle timeout, then returned, reclaim returns it at once",
          "[worker][submitter]") {
  // Invariant: a lease with nothing to run stays lease_idle_timeout (a task
  // submitted meanwhile reuses it without a new lease request), then is
  // returned (not killed) and its worker's connection closed; when the node
  // reclaims leases, idle ones go at once and busy ones when they go idle; an
  // empty queue is dropped.
  Rig rig;
  TaskId one = rig.Submit();
  rig.GrantAndConnect("", rig.node_a, 1, "worker-a");
  rig.runtime.Reply("worker-a", one);
  rig.runtime.Advance(kIdle / 2);
  TaskId two = rig.Submit();
  CHECK(rig.nodes.HeldAt("") == 0);
  REQUIRE(rig.runtime.PushedTo("worker-a") == std::vector<TaskId>{one, two});
  rig.runtime.Advance(kIdle);  // busy: the idle timer is off
  CHECK(rig.runtime.ended.empty());

  SECTION("idle timeout") {
    rig.runtime.Reply("worker-a", two);
    rig.runtime.Advance(kIdle - milliseconds(1));
    CHECK(rig.runtime.ended.empty());
    rig.runtime.Advance(milliseconds(1));
    REQUIRE(rig.runtime.ended.size() == 1);
    CHECK_FALSE(rig.runtime.ended[0].kill);
    CHECK(rig.runtime.workers.at("worker-a")->closed);
  }
  SECTION("reclaim") {
    rig.submitter.OnReclaimLeases();
    CHECK(rig.runtime.ended.empty());  // busy
    rig.runtime.Reply("worker-a", two);
    REQUIRE(rig.runtime.ended.size() == 1);
    CHECK_FALSE(rig.runtime.ended[0].kill);
  }
  CHECK(rig.submitter.TEST_NumLeases() == 0);
  CHECK(rig.submitter.TEST_NumQueues() == 1);
  rig.runtime.RunPosted();
  CHECK(rig.submitter.TEST_NumQueues() == 0);
  CHECK(rig.Finished(two));
}

TEST_CASE("a leased worker that cannot be connected: the lease is returned, another asked for",
          "[worker][submitter]") {
  // Invariant: a failed connect to a granted worker ends that lease without
  // killing (its node reclaims it) and costs the task nothing: it waits for
  // the next lease.
  Rig rig;
  TaskId task = rig.Submit(/*max_retries=*/0);
  REQUIRE(rig.Grant("", rig.node_a, 1, "worker-gone"));
  CHECK(rig.nodes.HeldAt("") == 0);  // the request counts until connected
  REQUIRE(rig.runtime.FinishConnect("worker-gone", /*ok=*/false));
  REQUIRE(rig.runtime.ended.size() == 1);
  CHECK_FALSE(rig.runtime.ended[0].kill);
  REQUIRE(rig.nodes.HeldAt("") == 1);
  rig.GrantAndConnect("", rig.node_a, 2, "worker-a");
  REQUIRE(rig.runtime.PushedTo("worker-a") == std::vector<TaskId>{task});
}

TEST_CASE("a crashed worker's task without retries fails with the daemon's exit cause",
          "[worker][submitter]") {
  // Invariant: a task whose worker dies with no retries left fails once, with
  // WORKER_CRASHED and the cause the node daemon gives (the lease is killed);
  // one with retries left is queued again at the front.
  Rig rig;
  TaskId task = rig.Submit(/*max_retries=*/0, "Crashy");
  rig.GrantAndConnect("", rig.node_a, 1, "worker-a");
  rig.runtime.Crash("worker-a");
  REQUIRE(rig.runtime.ended.size() == 1);
  CHECK(rig.runtime.ended[0].kill);
  REQUIRE(rig.runtime.exit_cause_asks.size() == 1);
  CHECK_FALSE(rig.Result(task).ready);
  rig.runtime.exit_cause_asks[0]("killed by signal 11 (SIGSEGV)");
  REQUIRE(rig.Failed(task));
  CHECK(rig.Result(task).failure->kind == proto::FailureKind::WORKER_CRASHED);
  CHECK_THAT(rig.Result(task).failure->message, Catch::Contains("SIGSEGV") &&
                                                   Catch::Contains("max_retries=0"));
}

TEST_CASE("without our node daemon, a submitted task fails at once", "[worker][submitter]") {
  // Invariant: with the local node gone no lease can be asked for: the queued
  // tasks fail with "lost the connection to the node daemon" (and the
  // submitter does not spin asking).
  Rig rig;
  rig.runtime.local_connected = false;
  TaskId task = rig.Submit();
  REQUIRE(rig.Failed(task));
  CHECK(rig.Result(task).failure->message == "lost the connection to the node daemon");
  CHECK(rig.nodes.HeldAt("") == 0);
}

TEST_CASE("lumen::Cancel: a queued task never runs, a running one fails now and is never retried",
          "[worker][submitter][cancel]") {
  // Invariant: a cancelled task's object fails with a cancelled failure at
  // once; a queued one is never pushed; a running one's later reply is
  // dropped (force=false) or its worker is closed and its lease killed
  // (force=true); it is never retried, even with retries left; other tasks
  // are not affected.
  Rig rig;
  SECTION("queued: removed before it gets a worker") {
    TaskId task = rig.Submit(/*max_retries=*/-1);
    REQUIRE(rig.submitter.Cancel(task, /*force=*/false));
    REQUIRE(rig.Failed(task));
    CHECK(rig.Result(task).failure->cancelled);
    CHECK_THAT(rig.Result(task).failure->message, Catch::Contains("before it started"));
    // The lease asked for before the cancel is granted: nothing is pushed.
    rig.GrantAndConnect("", rig.node_a, 1, "worker-a");
    CHECK(rig.runtime.PushedTo("worker-a").empty());
    CHECK_FALSE(rig.submitter.Cancel(task, false));  // gone
  }
  SECTION("running, force=false: the worker's answer is dropped") {
    TaskId task = rig.Submit(/*max_retries=*/3);
    TaskId other = rig.Submit(/*max_retries=*/3);
    rig.GrantAndConnect("", rig.node_a, 1, "worker-a");
    rig.GrantAndConnect("", rig.node_a, 2, "worker-b");
    REQUIRE(rig.runtime.PushedTo("worker-a") == std::vector<TaskId>{task});
    REQUIRE(rig.submitter.Cancel(task, /*force=*/false));
    REQUIRE(rig.Failed(task));
    CHECK(rig.Result(task).failure->cancelled);
    CHECK_FALSE(rig.runtime.workers.at("worker-a")->closed);
    rig.runtime.Reply("worker-a", task);  // it ran to its end
    REQUIRE(rig.Failed(task));
    CHECK(rig.Result(task).failure->cancelled);
    SECTION("its worker dies later: not retried") {
      TaskId task2 = rig.Submit(/*max_retries=*/3);
      REQUIRE(rig.runtime.PushedTo("worker-a").size() == 2);
      REQUIRE(rig.submitter.Cancel(task2, false));
      rig.runtime.Crash("worker-a");
      CHECK(rig.runtime.exit_cause_asks.empty());
      CHECK(rig.nodes.HeldAt("") == 0);  // nothing to run again
      CHECK(rig.Result(task2).failure->cancelled);
    }
    rig.runtime.Reply("worker-b", other);
    CHECK(rig.Finished(other));
  }
  SECTION("running, force=true: its worker is killed, it is not retried") {
    TaskId task = rig.Submit(/*max_retries=*/-1);
    rig.GrantAndConnect("", rig.node_a, 1, "worker-a");
    REQUIRE(rig.submitter.Cancel(task, /*force=*/true));
    CHECK(rig.runtime.workers.at("worker-a")->closed);
    REQUIRE(rig.runtime.ended.size() == 1);
    CHECK(rig.runtime.ended[0].lease_id == 1);
    CHECK(rig.runtime.ended[0].kill);
    REQUIRE(rig.Failed(task));
    CHECK(rig.Result(task).failure->cancelled);
    CHECK_THAT(rig.Result(task).failure->message, Catch::Contains("force=true"));
    CHECK(rig.runtime.exit_cause_asks.empty());
    CHECK(rig.nodes.HeldAt("") == 0);
    CHECK(rig.submitter.TEST_NumLeases() == 0);
  }
}

TEST_CASE("max_retries=-1 retries without limit and a finite budget is spent exactly",
          "[worker][submitter]") {
  // Invariant: a task with max_retries=-1 goes back to the queue after every
  // worker death (attempt + 1 each time); one with max_retries=2 runs exactly
  // 3 times and then fails with WORKER_CRASHED.
  Rig rig;
  TaskId forever = rig.Submit(/*max_retries=*/-1);
  for (int i = 0; i < 10; ++i) {
    std::string worker = "worker-" + std::to_string(i);
    rig.GrantAndConnect("", rig.node_a, i + 1, worker);
    REQUIRE(rig.runtime.PushedTo(worker) == std::vector<TaskId>{forever});
    CHECK(rig.attempts[forever]->attempt == static_cast<uint32_t>(i));
    rig.runtime.Crash(worker);
    CHECK_FALSE(rig.Result(forever).ready);
  }
  CHECK(rig.runtime.exit_cause_asks.empty());
  rig.GrantAndConnect("", rig.node_a, 100, "worker-last");
  rig.runtime.Reply("worker-last", forever);
  CHECK(rig.Finished(forever));

  Rig other;  // a fresh submitter: no idle lease left from above
  TaskId budget = other.Submit(/*max_retries=*/2);
  int pushes = 0;
  for (int i = 0; i < 3; ++i) {
    std::string worker = "budget-" + std::to_string(i);
    other.GrantAndConnect("", other.node_a, 200 + i, worker);
    pushes += static_cast<int>(other.runtime.PushedTo(worker).size());
    other.runtime.Crash(worker);
  }
  CHECK(pushes == 3);
  REQUIRE(other.runtime.exit_cause_asks.size() == 1);
  other.runtime.exit_cause_asks[0]("killed by SIGKILL");
  REQUIRE(other.Failed(budget));
  CHECK(other.Result(budget).failure->kind == proto::FailureKind::WORKER_CRASHED);
  CHECK(other.nodes.HeldAt("") == 0);
}

TEST_CASE("a task that throws is retried only with retry_exceptions, within its budget",
          "[worker][submitter]") {
  // Invariant: a TaskError reply is the task's result unless retry_exceptions
  // is set; with it the task runs again until its max_retries are spent, and
  // the last error is the result.
  Rig rig;
  auto throw_reply = [&](const std::string& worker, const TaskId& id) {
    capnp::MallocMessageBuilder message;
    auto reply = message.initRoot<proto::TaskReply>();
    reply.setTaskId(DataOf(id));
    reply.setExecMicros(10);
    auto error = reply.initResult().initError();
    error.setKind(proto::FailureKind::TASK_ERROR);
    error.setExceptionType("std::runtime_error");
    error.setMessage("boom");
    rig.runtime.workers.at(worker)->handlers.on_reply(reply.asReader());
  };
  bool retry = GENERATE(false, true);
  TaskId task = rig.Submit(/*max_retries=*/2);
  rig.attempts[task]->retry_exceptions = retry;
  rig.GrantAndConnect("", rig.node_a, 1, "worker-a");
  int runs = 0;
  while (!rig.Result(task).ready && runs < 10) {
    auto pushed = rig.runtime.PushedTo("worker-a");
    REQUIRE(static_cast<int>(pushed.size()) == runs + 1);
    throw_reply("worker-a", task);
    ++runs;
  }
  CHECK(runs == (retry ? 3 : 1));
  REQUIRE(rig.Failed(task));
  CHECK(rig.Result(task).failure->kind == proto::FailureKind::TASK_ERROR);
}

}  // namespace
}  // namespace lumen::runtime
