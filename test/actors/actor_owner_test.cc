// Deterministic tests of the owner-side actor manager (lumen/actors/actor_owner.h):
// the runtime is faked, holding every request (leases, processes, exit causes)
// until the test answers it. No processes, no sockets, no clock.
#include "lumen/actors/actor_owner.h"

#include <catch2/catch.hpp>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "lumen/actors/actor_task_submitter.h"

namespace lumen::actors {
namespace {

// What happened to the leases the fake handed out, by lease number.
struct LeaseLog {
  std::map<int, int> kills;     // lease -> End(kill=true) calls
  std::map<int, int> returns;   // lease -> End(kill=false) calls
  std::vector<std::function<void(std::string)>> exit_cause_questions;
};

class FakeLease : public LeasedWorker {
 public:
  FakeLease(LeaseLog& log, int number, bool* node_reachable)
      : log_(log), number_(number), node_reachable_(node_reachable) {}
  void End(bool kill) override { ++(kill ? log_.kills : log_.returns)[number_]; }
  bool NodeReachable() const override { return *node_reachable_; }
  void AskExitCause(std::function<void(std::string)> done) override {
    log_.exit_cause_questions.push_back(std::move(done));
  }

 private:
  LeaseLog& log_;
  int number_;
  bool* node_reachable_;
};

// The runtime, faked: worker requests and started processes are recorded for
// the test to answer; links record whether they were closed or dropped.
class FakeRuntime : public ActorLeaser, public ActorProcessStarter, public ActorNameRecorder {
 public:
  struct WorkerRequest {
    ObjectId id;
    int generation;
  };
  struct Started {
    ObjectId id;
    int generation;
    std::string address;
    uint32_t attempt;
    std::shared_ptr<bool> closed = std::make_shared<bool>(false);
    std::shared_ptr<bool> dropped = std::make_shared<bool>(false);
  };
  class FakeProcess : public ActorProcess {
   public:
    explicit FakeProcess(Started& s) : closed_(s.closed), dropped_(s.dropped) {}
    ~FakeProcess() override { *dropped_ = true; }
    void Close(const absl::Status&) override { *closed_ = true; }

   private:
    std::shared_ptr<bool> closed_, dropped_;
  };

  absl::Status RequestWorker(const ActorSpec& actor, int generation) override {
    if (!node_connected) return absl::UnavailableError("lost the connection to the node daemon");
    worker_requests.push_back({actor.id, generation});
    return absl::OkStatus();
  }
  std::unique_ptr<ActorProcess> StartProcess(const ActorSpec& actor, int generation,
                                             const WorkerPlacement& where,
                                             uint32_t attempt) override {
    started.push_back({actor.id, generation, where.address, attempt});
    return std::make_unique<FakeProcess>(started.back());
  }
  void ReleaseCreation(ActorSpec& actor) override { ++released[actor.id]; }
  void RecordAddress(const ActorSpec&, const std::string& address) override {
    recorded_addresses.push_back(address);
  }
  void ReleaseName(const ActorSpec& actor) override { released_names.push_back(actor.name); }

  // A lease numbered `number`, logged into `leases`.
  std::unique_ptr<LeasedWorker> Lease(int number) {
    return std::make_unique<FakeLease>(leases, number, &node_reachable);
  }

  bool node_connected = true;
  bool node_reachable = true;
  std::vector<WorkerRequest> worker_requests;
  std::vector<Started> started;
  std::map<ObjectId, int> released;
  std::vector<std::string> recorded_addresses;
  std::vector<std::string> released_names;
  LeaseLog leases;
};

const NodeId kNode1 = NodeId::Random();
const NodeId kNode2 = NodeId::Random();

std::unique_ptr<ActorSpec> Spec(const ObjectId& id, int max_restarts, int max_task_retries = 0) {
  auto spec = std::make_unique<ActorSpec>();
  spec->id = id;
  spec->factory = "Counter::Create";
  spec->max_restarts = max_restarts;
  spec->max_task_retries = max_task_retries;
  return spec;
}

WorkerPlacement On(const NodeId& node, const std::string& address, int pid = 100) {
  return WorkerPlacement{node, WorkerId::Random(), pid, address, {}};
}

struct Harness {
  FakeRuntime rt;
  ActorOwner owner{{.leaser = rt, .processes = rt, .names = rt}};
  ObjectId id = ObjectId::ForPut();
  int next_lease = 1;

  // Grants the last worker request at `address` on `node` and reports the
  // factory returned; returns the lease number.
  int Grant(const NodeId& node, const std::string& address) {
    REQUIRE(!rt.worker_requests.empty());
    int lease = next_lease++;
    owner.OnLeaseGranted(id, rt.worker_requests.back().generation, On(node, address),
                         rt.Lease(lease));
    return lease;
  }
  int CreateAt(const NodeId& node, const std::string& address) {
    int lease = Grant(node, address);
    REQUIRE(!rt.started.empty());
    owner.OnCreated(id, rt.started.back().generation, std::nullopt);
    return lease;
  }
  // The owner's answer if it answers now (a waiter left behind owns its slot).
  std::optional<ActorLocation> Where(const std::string& failed_address = "") {
    auto answer = std::make_shared<std::optional<ActorLocation>>();
    owner.WhenSettled(id, failed_address, [answer](ActorLocation where) { *answer = where; });
    return *answer;
  }
  int Generation() {
    int g = 0;
    owner.ForEach([&](const OwnedActor& a) {
      if (a.spec->id == id) g = a.life.generation();
    });
    return g;
  }
  int Restarts() {
    int r = -1;
    owner.ForEach([&](const OwnedActor& a) {
      if (a.spec->id == id) r = a.life.restarts();
    });
    return r;
  }
};

TEST_CASE("a restart budget of N gives exactly N restarts, then death with the cause",
          "[actors][owner]") {
  // Invariant: an actor whose process keeps dying is started max_restarts + 1
  // times in all, each a new generation whose creation carries its restart
  // count as attempt; the loss after the last restart asks the node how the
  // process ended and the actor dies with that cause, once.
  constexpr int kRestarts = 3;
  Harness h;
  h.owner.Add(Spec(h.id, kRestarts));
  h.owner.Start(h.id);
  for (int i = 0; i <= kRestarts; ++i) {
    REQUIRE(h.rt.worker_requests.size() == static_cast<size_t>(i + 1));
    REQUIRE(h.rt.worker_requests.back().generation == i + 1);
    int lease = h.CreateAt(kNode1, absl::StrCat("w", i));
    REQUIRE(h.rt.started.back().attempt == static_cast<uint32_t>(i));
    REQUIRE(h.Where()->address == absl::StrCat("w", i));
    h.owner.OnProcessLost(h.id, i + 1, absl::UnavailableError("connection reset"));
    REQUIRE(h.rt.leases.kills[lease] == 1);  // its resources are freed at once
    REQUIRE(*h.rt.started.back().dropped);
  }
  REQUIRE(h.Restarts() == kRestarts);
  REQUIRE(h.rt.started.size() == kRestarts + 1);
  REQUIRE(h.rt.worker_requests.size() == kRestarts + 1);  // no restart after the last
  // Callers wait while the node is asked how it ended.
  REQUIRE_FALSE(h.Where().has_value());
  REQUIRE(h.rt.leases.exit_cause_questions.size() == 1);
  REQUIRE(h.rt.released.empty());
  h.rt.leases.exit_cause_questions[0]("killed by signal 9 (SIGKILL)");
  REQUIRE(h.rt.released[h.id] == 1);
  auto where = h.Where();
  REQUIRE(where.has_value());
  REQUIRE_FALSE(where->alive);
  REQUIRE(where->death.find("killed by signal 9 (SIGKILL) (after 3 restarts)") !=
          std::string::npos);
  // A late report of the same loss changes nothing.
  h.owner.OnProcessLost(h.id, kRestarts + 1, absl::UnavailableError("again"));
  REQUIRE(h.rt.worker_requests.size() == kRestarts + 1);
  REQUIRE(h.rt.released[h.id] == 1);
}

TEST_CASE("kill during a restart ends the actor dead with no further restarts",
          "[actors][owner]") {
  // Invariant: once Kill(no_restart) is asked, the actor reaches DEAD and stays
  // there: a worker granted afterwards for the pending restart is killed
  // without starting a process, and no later loss starts another incarnation.
  Harness h;
  h.owner.Add(Spec(h.id, /*max_restarts=*/5));
  h.owner.Start(h.id);
  h.CreateAt(kNode1, "w1");
  h.owner.OnProcessLost(h.id, 1, absl::UnavailableError("connection reset"));
  REQUIRE(h.rt.worker_requests.size() == 2);  // restarting: a worker is asked for
  std::optional<ActorLocation> waiter;
  h.owner.WhenSettled(h.id, "w1", [&](ActorLocation where) { waiter = where; });
  REQUIRE_FALSE(waiter.has_value());

  h.owner.Kill(h.id, /*no_restart=*/true, "killed by lumen::ActorHandle::Kill()");
  REQUIRE(waiter.has_value());  // the caller waiting for the restart learns it died
  REQUIRE_FALSE(waiter->alive);
  REQUIRE(waiter->death == "killed by lumen::ActorHandle::Kill()");
  // The worker granted for generation 2 arrives late.
  int late = h.Grant(kNode1, "w2");
  REQUIRE(h.rt.leases.kills[late] == 1);
  REQUIRE(h.rt.started.size() == 1);
  h.owner.OnProcessLost(h.id, 2, absl::UnavailableError("gone"));
  h.owner.OnCreated(h.id, 2, std::nullopt);
  REQUIRE(h.rt.worker_requests.size() == 2);
  REQUIRE(h.Restarts() == 1);
  REQUIRE_FALSE(h.Where()->alive);
  REQUIRE(h.rt.released[h.id] == 1);
}

TEST_CASE("kill while the process is being connected waits for its end, then no restart",
          "[actors][owner]") {
  // Invariant: a kill that reaches a linked process goes through its node (the
  // lease is killed) and the actor is dead when the process is gone, however
  // many restarts it had left.
  Harness h;
  h.owner.Add(Spec(h.id, /*max_restarts=*/5));
  h.owner.Start(h.id);
  int lease = h.Grant(kNode1, "w1");  // linked, the factory has not returned
  h.owner.Kill(h.id, /*no_restart=*/true, "killed");
  REQUIRE(h.rt.leases.kills[lease] == 1);
  REQUIRE_FALSE(h.Where().has_value());  // not dead until the process is gone
  h.owner.OnProcessLost(h.id, 1, absl::UnavailableError("connection refused"));
  REQUIRE(h.Where()->death == "killed");
  REQUIRE(h.rt.worker_requests.size() == 1);
}

TEST_CASE("a kill without no_restart restarts the actor", "[actors][owner]") {
  // Invariant: Kill(no_restart=false) only ends the current process; the
  // actor comes back as the next generation.
  Harness h;
  h.owner.Add(Spec(h.id, /*max_restarts=*/1));
  h.owner.Start(h.id);
  int lease = h.CreateAt(kNode1, "w1");
  h.owner.Kill(h.id, /*no_restart=*/false, "restart it");
  REQUIRE(h.rt.leases.kills[lease] == 1);
  h.owner.OnProcessLost(h.id, 1, absl::UnavailableError("killed"));
  REQUIRE(h.rt.worker_requests.size() == 2);
  h.CreateAt(kNode2, "w2");
  REQUIRE(h.Where()->address == "w2");
}

TEST_CASE("a worker granted after its node died is not used", "[actors][owner]") {
  // Invariant: no incarnation runs on a node declared dead: a grant from it
  // that crossed the death is killed and a worker is asked again for the same
  // generation, without spending a restart (the actor never ran there).
  Harness h;
  h.owner.Add(Spec(h.id, /*max_restarts=*/0));
  h.owner.Start(h.id);
  REQUIRE(h.rt.worker_requests.size() == 1);
  auto closed = h.owner.OnNodeDead(kNode1, absl::UnavailableError("node 1 was declared dead"));
  REQUIRE(closed.empty());  // nothing of ours ran there yet
  int late = h.Grant(kNode1, "w-dead");
  REQUIRE(h.rt.leases.kills[late] == 1);
  REQUIRE(h.rt.started.empty());
  REQUIRE(h.rt.worker_requests.size() == 2);
  REQUIRE(h.rt.worker_requests.back().generation == 1);
  REQUIRE(h.Restarts() == 0);
  h.CreateAt(kNode2, "w2");
  REQUIRE(h.rt.started.size() == 1);
  REQUIRE(h.rt.started[0].attempt == 0);
  REQUIRE(h.Where()->address == "w2");
}

TEST_CASE("a node's death closes the links of the actors there, which restart elsewhere",
          "[actors][owner]") {
  // Invariant: OnNodeDead closes the link of every actor placed on that node
  // (and names it for the runtime), leaves the others alone, and the loss that
  // follows restarts the actor as a new generation.
  Harness h;
  ObjectId other = ObjectId::ForPut();
  h.owner.Add(Spec(h.id, /*max_restarts=*/1));
  h.owner.Add(Spec(other, /*max_restarts=*/1));
  h.owner.Start(h.id);
  h.CreateAt(kNode1, "w1");
  h.owner.Start(other);
  h.owner.OnLeaseGranted(other, 1, On(kNode2, "w-other"), h.rt.Lease(99));
  auto closed = h.owner.OnNodeDead(kNode1, absl::UnavailableError("node 1 died"));
  REQUIRE(closed == std::vector<std::pair<ObjectId, std::string>>{{h.id, "w1"}});
  REQUIRE(*h.rt.started[0].closed);
  REQUIRE_FALSE(*h.rt.started[1].closed);
  h.owner.OnProcessLost(h.id, 1, absl::UnavailableError("node 1 died"));
  REQUIRE(h.rt.worker_requests.back().id == h.id);
  REQUIRE(h.rt.worker_requests.back().generation == 2);
}

TEST_CASE("the owner restarts an actor while a caller's ordered calls are in flight",
          "[actors][owner]") {
  // Invariant: with the owner answering the caller's "where is it?", calls of
  // the dead generation are resent to the next one only when max_task_retries
  // allows (else they fail), every sequence number reaches each incarnation at
  // most once and in increasing order, and an answered call is never resent.
  // (actor_task_submitter_test covers the submitter alone with scripted
  // answers; here the answers come from the owner's restart.)
  for (int max_task_retries : {0, 1}) {
    DYNAMIC_SECTION("max_task_retries=" << max_task_retries) {
      Harness h;
      h.owner.Add(Spec(h.id, /*max_restarts=*/1, max_task_retries));
      h.owner.Start(h.id);

      // The caller's transport: Locate asks our owner; channels always open.
      struct Caller : ActorCallTransport {
        ActorOwner* owner = nullptr;
        ActorTaskSubmitter* submitter = nullptr;
        std::vector<std::pair<std::string, uint64_t>> opens;  // address, channel
        std::vector<std::pair<uint64_t, uint64_t>> pushed;    // channel, sequence
        std::map<uint64_t, std::string> failed;
        uint64_t next_channel = 1;
        void Locate(const ObjectId& actor, const std::string&,
                    const std::string& failed_address) override {
          owner->WhenSettled(actor, failed_address,
                             [this, actor](ActorLocation where) {
                               submitter->OnLocated(actor, std::move(where));
                             });
        }
        void OpenChannel(const ObjectId&, const std::string& address) override {
          opens.emplace_back(address, next_channel++);
        }
        void Push(uint64_t channel, const ActorCall& call) override {
          pushed.emplace_back(channel, call.sequence);
        }
        void Fail(std::unique_ptr<ActorCall> call, TaskFailure failure) override {
          failed[call->sequence] = failure.message;
        }
        void FailResult(const ActorCall&, const TaskFailure&) override {}
      } caller;
      ActorTaskSubmitter submitter(caller);
      caller.owner = &h.owner;
      caller.submitter = &submitter;

      std::vector<TaskId> ids;
      for (int i = 1; i <= 4; ++i) {
        auto call = std::make_unique<ActorCall>();
        call->task_id = TaskId::Random();
        call->function = absl::StrCat("Add", i);
        call->resolved = true;
        ids.push_back(call->task_id);
        submitter.Submit(h.id, "me", std::move(call));
      }
      submitter.OnCallResolved(h.id);
      REQUIRE(caller.opens.empty());  // waits for the actor to be created
      h.CreateAt(kNode1, "w1");
      REQUIRE(caller.opens.size() == 1);
      REQUIRE(caller.pushed.empty());  // waits for the channel to open
      submitter.OnChannelOpened(h.id, "w1", caller.opens[0].second);
      REQUIRE(caller.pushed.size() == 4);
      REQUIRE(submitter.TakeReplied(h.id, ids[0]) != nullptr);

      // The worker dies with calls 2..4 in flight: both sides hear of it.
      h.owner.OnProcessLost(h.id, 1, absl::UnavailableError("connection reset"));
      submitter.OnChannelLost(h.id, caller.opens[0].second);
      REQUIRE(caller.opens.size() == 1);  // the caller waits for the restart
      h.CreateAt(kNode2, "w2");
      REQUIRE(caller.opens.size() == 2);
      REQUIRE(caller.opens[1].first == "w2");
      submitter.OnChannelOpened(h.id, "w2", caller.opens[1].second);

      std::map<uint64_t, std::vector<uint64_t>> per_channel;
      for (const auto& [channel, sequence] : caller.pushed) {
        per_channel[channel].push_back(sequence);
      }
      REQUIRE(per_channel[caller.opens[0].second] == std::vector<uint64_t>{1, 2, 3, 4});
      if (max_task_retries == 0) {
        REQUIRE(per_channel[caller.opens[1].second].empty());
        REQUIRE(caller.failed.size() == 3);
        for (uint64_t seq : {2, 3, 4}) {
          REQUIRE(caller.failed[seq].find("max_task_retries=0") != std::string::npos);
        }
      } else {
        REQUIRE(per_channel[caller.opens[1].second] == std::vector<uint64_t>{2, 3, 4});
        REQUIRE(caller.failed.empty());
      }
      // A late reply from the first incarnation is not taken.
      REQUIRE(submitter.TakeReplied(h.id, ids[0]) == nullptr);
    }
  }
}

TEST_CASE("stale events of an older generation change nothing", "[actors][owner]") {
  // Invariant: a creation reply, loss or refusal of a generation that is no
  // longer current neither revives, kills nor restarts the actor.
  Harness h;
  h.owner.Add(Spec(h.id, /*max_restarts=*/2));
  h.owner.Start(h.id);
  h.CreateAt(kNode1, "w1");
  h.owner.OnProcessLost(h.id, 1, absl::UnavailableError("reset"));
  REQUIRE(h.Generation() == 2);
  h.owner.OnCreated(h.id, 1, std::nullopt);
  h.owner.OnProcessLost(h.id, 1, absl::UnavailableError("reset again"));
  h.owner.OnLeaseRefused(h.id, 1, "infeasible");
  REQUIRE_FALSE(h.Where().has_value());  // still restarting
  REQUIRE(h.rt.worker_requests.size() == 2);
  REQUIRE(h.Restarts() == 1);
}

TEST_CASE("a factory that throws kills the actor without restarts", "[actors][owner]") {
  // Invariant: a failed factory is final whatever max_restarts says: its lease
  // is killed, the actor is dead with the factory's error, and its process's
  // end restarts nothing.
  Harness h;
  auto spec = Spec(h.id, /*max_restarts=*/3);
  spec->name = "counter";
  h.owner.Add(std::move(spec));
  h.owner.Start(h.id);
  int lease = h.Grant(kNode1, "w1");
  h.owner.OnCreated(h.id, 1,
                    TaskFailure{proto::FailureKind::TASK_ERROR, "std::runtime_error", "bad", ""});
  REQUIRE(h.rt.leases.kills[lease] == 1);
  REQUIRE(h.Where()->death ==
          "the actor's factory Counter::Create failed: std::runtime_error: bad");
  REQUIRE(h.rt.released_names == std::vector<std::string>{"counter"});
  h.owner.OnProcessLost(h.id, 1, absl::UnavailableError("killed"));
  REQUIRE(h.rt.worker_requests.size() == 1);
}

TEST_CASE("a refused lease or no node connection kills the actor", "[actors][owner]") {
  // Invariant: when no worker can be had the actor dies with the reason, and
  // callers waiting for it are answered.
  Harness h;
  h.owner.Add(Spec(h.id, 1));
  h.owner.Start(h.id);
  std::optional<ActorLocation> waiter;
  h.owner.WhenSettled(h.id, "", [&](ActorLocation where) { waiter = where; });
  h.owner.OnLeaseRefused(h.id, 1, "no node has GPU: 8");
  REQUIRE(waiter.has_value());
  REQUIRE(waiter->death == "cannot place the actor: no node has GPU: 8");

  Harness h2;
  h2.rt.node_connected = false;
  h2.owner.Add(Spec(h2.id, 1));
  h2.owner.Start(h2.id);
  REQUIRE(h2.Where()->death == "lost the connection to the node daemon");
}

TEST_CASE("an entry goes once its actor is dead and out of scope", "[actors][owner]") {
  // Invariant: the table never keeps an actor that is dead and has no handle
  // left (no one can ask about it), and never drops one that may still be
  // asked about: alive, or dead with handles left, or detached.
  Harness h;
  h.owner.Add(Spec(h.id, 0));
  h.owner.Start(h.id);
  h.CreateAt(kNode1, "w1");
  // Out of scope while alive: killed through its node, erased once dead.
  h.owner.OnOutOfScope(h.id);
  REQUIRE(h.owner.Owns(h.id));
  REQUIRE(h.rt.leases.kills[1] == 1);
  h.owner.OnProcessLost(h.id, 1, absl::UnavailableError("killed"));
  REQUIRE_FALSE(h.owner.Owns(h.id));
  REQUIRE(h.owner.size() == 0);
  REQUIRE(h.Where()->death.find("unknown to its owner") != std::string::npos);

  // Dead first (with handles left): kept; then out of scope: erased.
  ObjectId second = ObjectId::ForPut();
  h.owner.Add(Spec(second, 0));
  h.owner.Start(second);
  h.owner.OnLeaseRefused(second, 1, "infeasible");
  REQUIRE(h.owner.Owns(second));
  h.owner.OnOutOfScope(second);
  REQUIRE_FALSE(h.owner.Owns(second));

  // Detached: out of scope changes nothing until it dies.
  ObjectId detached = ObjectId::ForPut();
  auto spec = Spec(detached, 0);
  spec->detached = true;
  spec->name = "service";
  h.owner.Add(std::move(spec));
  h.owner.Start(detached);
  h.owner.OnLeaseGranted(detached, 1, On(kNode1, "w-detached"), h.rt.Lease(7));
  h.owner.OnCreated(detached, 1, std::nullopt);
  REQUIRE(h.rt.recorded_addresses == std::vector<std::string>{"w-detached"});
  h.owner.OnOutOfScope(detached);
  REQUIRE(h.owner.Owns(detached));
  REQUIRE(h.rt.leases.kills[7] == 0);
  h.owner.Kill(detached, /*no_restart=*/true, "killed");
  h.owner.OnProcessLost(detached, 1, absl::UnavailableError("killed"));
  REQUIRE_FALSE(h.owner.Owns(detached));
}

TEST_CASE("a kill that cannot reach the node ends the actor at once", "[actors][owner]") {
  // Invariant: Kill(no_restart) never leaves the actor waiting for a process
  // end that cannot be caused: without a reachable node it is dead now.
  Harness h;
  h.owner.Add(Spec(h.id, 2));
  h.owner.Start(h.id);
  h.CreateAt(kNode1, "w1");
  h.rt.node_reachable = false;
  h.owner.Kill(h.id, /*no_restart=*/true, "killed");
  REQUIRE(h.Where()->death == "killed");
  REQUIRE(h.rt.leases.kills[1] == 0);
}

}  // namespace
}  // namespace lumen::actors
