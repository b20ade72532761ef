#include "lumen/actors/actor_task_submitter.h"

#include <catch2/catch.hpp>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace lumen::actors {
namespace {

// The runtime, faked: Locate and OpenChannel requests are held until the test
// answers them, channels open only to addresses the test declared reachable,
// and every push and failure is recorded.
class FakeTransport : public ActorCallTransport {
 public:
  struct Pushed {
    uint64_t channel;
    uint64_t sequence;
    uint32_t attempt;
  };
  struct LocateRequest {
    ObjectId actor;
    std::string owner;
    std::string failed_address;
  };

  void Locate(const ObjectId& actor, const std::string& owner,
              const std::string& failed_address) override {
    locates.push_back({actor, owner, failed_address});
  }
  void OpenChannel(const ObjectId& actor, const std::string& address) override {
    opens.push_back({actor, address});
  }
  // Answers the channel requests held so far (and any they lead to).
  void AnswerOpens(ActorTaskSubmitter& s) {
    while (!opens.empty()) {
      auto [actor, address] = opens.front();
      opens.erase(opens.begin());
      if (reachable.contains(address)) {
        s.OnChannelOpened(actor, address, next_channel++);
      } else if (out_of_fds) {
        s.OnChannelOpened(actor, address,
                          absl::ResourceExhaustedError("Too many open files (out of file descriptors)"));
      } else {
        s.OnChannelOpened(actor, address, absl::UnavailableError("connection refused"));
      }
    }
  }
  void Push(uint64_t channel, const ActorCall& call) override {
    pushed.push_back({channel, call.sequence, call.attempt});
  }
  void Fail(std::unique_ptr<ActorCall> call, TaskFailure failure) override {
    failed[call->sequence] = failure.message;
    failed_functions.push_back(call->function);
  }
  void FailResult(const ActorCall& call, const TaskFailure& failure) override {
    failed_early[call.sequence] = failure.message;
  }

  std::set<std::string> reachable;
  bool out_of_fds = false;  // an unreachable address fails as EMFILE would
  uint64_t next_channel = 1;
  std::vector<LocateRequest> locates;
  std::vector<std::pair<ObjectId, std::string>> opens;  // held channel requests
  std::vector<Pushed> pushed;
  std::map<uint64_t, std::string> failed;
  std::vector<std::string> failed_functions;
  std::map<uint64_t, std::string> failed_early;
};

const ObjectId kActor = ObjectId::ForPut();
const std::string kOwner = "owner:1";

// The owner answers `location`, and the channel it names opens (or fails).
void Located(FakeTransport& t, ActorTaskSubmitter& s, ActorLocation location) {
  s.OnLocated(kActor, std::move(location));
  t.AnswerOpens(s);
}

std::unique_ptr<ActorCall> Call(int n) {
  auto call = std::make_unique<ActorCall>();
  call->task_id = TaskId::Random();
  call->function = absl::StrCat("Method", n);
  call->resolved = true;
  return call;
}

TEST_CASE("calls leave in submission order once resolved", "[actors]") {
  // Invariant: a call whose arguments resolve early never overtakes an earlier
  // call that is still resolving; all go out in sequence order.
  FakeTransport t;
  ActorTaskSubmitter s(t);
  t.reachable.insert("a1");
  auto first = Call(1);
  first->resolved = false;
  ActorCall* first_raw = s.Submit(kActor, kOwner, std::move(first));
  s.Submit(kActor, kOwner, Call(2));
  s.OnCallResolved(kActor);
  REQUIRE(t.locates.size() == 1);
  Located(t, s, {.alive = true, .address = "a1"});
  REQUIRE(t.pushed.empty());  // call 2 waits behind call 1
  first_raw->resolved = true;
  s.OnCallResolved(kActor);
  REQUIRE(t.pushed.size() == 2);
  REQUIRE(t.pushed[0].sequence == 1);
  REQUIRE(t.pushed[1].sequence == 2);
}

TEST_CASE("an actor restarting while ordered calls are in flight", "[actors]") {
  // Invariant: across a restart, each sequence number is delivered to each
  // incarnation at most once and in increasing order; an answered call is
  // never resent, and unanswered ones go first to the next incarnation.
  FakeTransport t;
  ActorTaskSubmitter s(t);
  t.reachable = {"a1", "a2"};
  std::vector<TaskId> ids;
  for (int i = 1; i <= 5; ++i) {
    auto call = Call(i);
    ids.push_back(call->task_id);
    s.Submit(kActor, kOwner, std::move(call));
  }
  s.OnCallResolved(kActor);
  Located(t, s, {.alive = true, .address = "a1", .max_task_retries = 1});
  REQUIRE(t.pushed.size() == 5);
  uint64_t first_channel = t.pushed[0].channel;
  // Calls 1 and 2 are answered, then the process dies with 3..5 in flight.
  REQUIRE(s.TakeReplied(kActor, ids[0]) != nullptr);
  REQUIRE(s.TakeReplied(kActor, ids[1]) != nullptr);
  // A call submitted while the actor restarts waits behind the interrupted ones.
  s.OnChannelLost(kActor, first_channel);
  s.Submit(kActor, kOwner, Call(6));
  s.OnCallResolved(kActor);
  REQUIRE(t.locates.size() == 2);
  REQUIRE(t.locates.back().failed_address == "a1");
  // A late reply from the dead incarnation is not taken twice.
  REQUIRE(s.TakeReplied(kActor, ids[0]) == nullptr);
  Located(t, s, {.alive = true, .address = "a2", .max_task_retries = 1});

  std::map<uint64_t, std::vector<uint64_t>> per_channel;
  for (const auto& p : t.pushed) per_channel[p.channel].push_back(p.sequence);
  REQUIRE(per_channel.size() == 2);
  for (const auto& [channel, sequences] : per_channel) {
    for (size_t i = 1; i < sequences.size(); ++i) REQUIRE(sequences[i - 1] < sequences[i]);
  }
  uint64_t second_channel = t.pushed.back().channel;
  REQUIRE(per_channel[second_channel] == std::vector<uint64_t>{3, 4, 5, 6});
  for (const auto& p : t.pushed) {
    if (p.channel == second_channel && p.sequence <= 5) REQUIRE(p.attempt == 1);
  }
  REQUIRE(t.failed.empty());
}

TEST_CASE("interrupted calls beyond max_task_retries fail, later ones still run", "[actors]") {
  // Invariant: a call interrupted by a restart is resent at most
  // max_task_retries times; the calls queued behind it are not held up.
  FakeTransport t;
  ActorTaskSubmitter s(t);
  t.reachable = {"a1", "a2"};
  s.Submit(kActor, kOwner, Call(1));
  s.OnCallResolved(kActor);
  Located(t, s, {.alive = true, .address = "a1", .max_task_retries = 0});
  s.OnChannelLost(kActor, t.pushed.back().channel);
  s.Submit(kActor, kOwner, Call(2));
  Located(t, s, {.alive = true, .address = "a2"});
  REQUIRE(t.failed.count(1) == 1);
  REQUIRE(t.failed[1].find("max_task_retries=0") != std::string::npos);
  REQUIRE(t.pushed.size() == 2);
  REQUIRE(t.pushed.back().sequence == 2);
}

TEST_CASE("an unreachable address is skipped when locating again", "[actors]") {
  // Invariant: an address that refuses the channel is reported as failed in
  // the next Locate, so the owner answers with the next incarnation.
  FakeTransport t;
  ActorTaskSubmitter s(t);
  t.reachable = {"a2"};
  s.Submit(kActor, kOwner, Call(1));
  s.OnCallResolved(kActor);
  Located(t, s, {.alive = true, .address = "a1"});
  REQUIRE(t.locates.size() == 2);
  REQUIRE(t.locates.back().failed_address == "a1");
  REQUIRE(t.pushed.empty());
  Located(t, s, {.alive = true, .address = "a2"});
  REQUIRE(t.pushed.size() == 1);
}

TEST_CASE("a channel this process cannot open for want of descriptors fails the calls", "[actors]") {
  // Invariant: when opening the channel fails because the caller is out of
  // file descriptors (not because the actor moved), the waiting calls fail
  // with that cause instead of waiting for a new address for ever (the
  // 10,000-actor run hung so at its 20,000-descriptor limit); a later call
  // opens the channel again.
  FakeTransport t;
  ActorTaskSubmitter s(t);
  t.out_of_fds = true;
  s.Submit(kActor, kOwner, Call(1));
  s.OnCallResolved(kActor);
  Located(t, s, {.alive = true, .address = "a1"});
  REQUIRE(t.locates.size() == 1);  // not asked where it moved
  REQUIRE(t.failed.size() == 1);
  CHECK(t.failed.begin()->second.find("file descriptors") != std::string::npos);
  CHECK(t.pushed.empty());
  t.reachable = {"a1"};
  s.Submit(kActor, kOwner, Call(2));
  s.OnCallResolved(kActor);
  REQUIRE(t.locates.size() == 2);
  CHECK(t.locates.back().failed_address.empty());
  Located(t, s, {.alive = true, .address = "a1"});
  CHECK(t.pushed.size() == 1);
  CHECK(t.failed.size() == 1);
}

TEST_CASE("calls wait in order while the channel is being opened", "[actors]") {
  // Invariant: no call leaves before its channel is open; calls submitted
  // while it opens queue behind the earlier ones, and all go in sequence order
  // once it is open. A failed open sends nothing and asks for the actor again,
  // skipping that address; a lost channel is only reported for open ones.
  FakeTransport t;
  ActorTaskSubmitter s(t);
  t.reachable = {"a2"};
  s.Submit(kActor, kOwner, Call(1));
  s.OnCallResolved(kActor);
  s.OnLocated(kActor, {.alive = true, .address = "a1"});
  REQUIRE(t.opens.size() == 1);
  s.Submit(kActor, kOwner, Call(2));
  s.OnCallResolved(kActor);
  REQUIRE(t.pushed.empty());
  REQUIRE(t.locates.size() == 1);  // no second question while it opens
  t.AnswerOpens(s);                // "a1" refuses
  REQUIRE(t.pushed.empty());
  REQUIRE(t.locates.size() == 2);
  REQUIRE(t.locates.back().failed_address == "a1");
  s.OnLocated(kActor, {.alive = true, .address = "a2"});
  s.Submit(kActor, kOwner, Call(3));
  s.OnCallResolved(kActor);
  REQUIRE(t.pushed.empty());
  t.AnswerOpens(s);
  REQUIRE(t.pushed.size() == 3);
  for (size_t i = 0; i < t.pushed.size(); ++i) REQUIRE(t.pushed[i].sequence == i + 1);
  REQUIRE(t.failed.empty());
}

TEST_CASE("a dead actor's state is kept while its channel is being opened", "[actors]") {
  // Invariant: the submitter forgets an actor only when the runtime can no
  // longer answer about it: an open in progress is answered into kept state.
  FakeTransport t;
  ActorTaskSubmitter s(t);
  t.reachable = {"a1"};
  s.Submit(kActor, kOwner, Call(1));
  s.OnCallResolved(kActor);
  s.OnLocated(kActor, {.alive = true, .address = "a1"});
  s.MarkDead(kActor, "killed");
  s.OnCallResolved(kActor);  // fails the queued call
  REQUIRE(t.failed.count(1) == 1);
  REQUIRE(s.TEST_ActorCount() == 1);
  t.AnswerOpens(s);
  REQUIRE(s.OpenChannelOf(kActor).has_value());
  REQUIRE(t.pushed.empty());
}

TEST_CASE("a dead actor fails every call, and its state is dropped", "[actors]") {
  // Invariant: once the owner says dead, running calls fail naming what they
  // ran, queued ones fail, unresolved ones fail their result at once and are
  // freed when they resolve; calls submitted later fail too.
  FakeTransport t;
  ActorTaskSubmitter s(t);
  t.reachable = {"a1"};
  s.Submit(kActor, kOwner, Call(1));
  s.OnCallResolved(kActor);
  Located(t, s, {.alive = true, .address = "a1"});
  auto unresolved = Call(2);
  unresolved->resolved = false;
  ActorCall* raw = s.Submit(kActor, kOwner, std::move(unresolved));
  s.OnChannelLost(kActor, t.pushed.back().channel);
  s.OnLocated(kActor, {.alive = false, .death = "out of restarts"});
  REQUIRE(t.failed[1].find("died while running Method1: out of restarts") != std::string::npos);
  REQUIRE(t.failed_early.count(2) == 1);
  REQUIRE(t.failed.count(2) == 0);
  REQUIRE(s.TEST_ActorCount() == 1);
  raw->resolved = true;
  s.OnCallResolved(kActor);
  REQUIRE(t.failed.count(2) == 1);
  REQUIRE(s.TEST_ActorCount() == 0);
  // Remembered: a later call fails without asking anyone.
  s.Submit(kActor, kOwner, Call(3));
  s.OnCallResolved(kActor);
  REQUIRE(t.failed_functions.back() == "Method3");
  REQUIRE(t.failed_functions.size() == 3);
  REQUIRE(t.locates.size() == 2);
}

TEST_CASE("the actors located through an owner are listed", "[actors]") {
  // Invariant: LocatingThrough names exactly the actors waiting for an answer
  // from that owner (the runtime fails them when the owner dies).
  FakeTransport t;
  ActorTaskSubmitter s(t);
  ObjectId other = ObjectId::ForPut();
  s.Submit(kActor, kOwner, Call(1));
  s.Submit(other, "owner:2", Call(1));
  s.OnCallResolved(kActor);
  s.OnCallResolved(other);
  using Locating = ActorTaskSubmitter::Locating;
  REQUIRE(s.LocatingThrough(kOwner) == std::vector<Locating>{{kActor, ""}});
  s.OnLocated(kActor, {.alive = false, .death = "its owner died"});
  REQUIRE(s.LocatingThrough(kOwner).empty());
  REQUIRE(s.LocatingThrough("owner:2") == std::vector<Locating>{{other, ""}});
}

}  // namespace
}  // namespace lumen::actors
