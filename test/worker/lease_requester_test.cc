#include "core/worker/lease_requester.h"

#include <catch2/catch.hpp>

#include <capnp/message.h>

#include <deque>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace lumen::runtime {
namespace {

using std::chrono::milliseconds;

// The node daemons and the clock, faked: each lease request is held until the
// test answers it (Reply) or kills its node (Kill, which answers every held
// request with "the node went away", as a closing connection does); timers run
// only when the test advances the clock.
class FakeNodes : public LeaseTransport {
 public:
  struct Held {
    std::string shape;
    bool grant_or_reject;
    std::function<bool(proto::Envelope::Reader)> on_reply;
  };

  bool LocalNodeConnected() override { return !dead.contains(""); }
  void SendLeaseRequest(const std::string& target, const LeaseShape& shape,
                        bool grant_or_reject, std::function<bool(proto::Envelope::Reader)> on_reply,
                        SentCallback on_sent) override {
    if (dead.contains(target)) {
      on_sent(absl::UnavailableError("connection refused"));
      return;
    }
    held[target].push_back({shape.name, grant_or_reject, std::move(on_reply)});
    ++requests[target];
    on_sent(std::shared_ptr<Connection>());
  }
  void OnSpillback(const std::string& address, const NodeId&) override {
    spilled_to.push_back(address);
  }
  void After(milliseconds delay, std::function<void()> fn) override {
    timers.emplace(now + delay, std::move(fn));
  }

  // Answers the oldest request held at `node`; false when none is held (a
  // reply that finds nobody listening is dropped, as the runtime drops it).
  bool Reply(const std::string& node, const std::function<void(proto::LeaseReply::Builder)>& fill) {
    auto it = held.find(node);
    if (it == held.end() || it->second.empty()) return false;
    capnp::MallocMessageBuilder message;
    auto env = message.initRoot<proto::Envelope>();
    fill(env.initLeaseReply());
    Held request = std::move(it->second.front());
    it->second.pop_front();
    if (request.on_reply(env.asReader())) it->second.push_front(std::move(request));
    return true;
  }
  // The node dies: held requests hear that it went away; new ones cannot reach it.
  void Kill(const std::string& node) {
    dead.insert(node);
    auto requests_there = std::move(held[node]);
    held.erase(node);
    capnp::MallocMessageBuilder message;
    auto empty = message.initRoot<proto::Envelope>().asReader();
    for (auto& request : requests_there) request.on_reply(empty);
  }
  void Advance(milliseconds by) {
    now += by;
    while (!timers.empty() && timers.begin()->first <= now) {
      auto fn = std::move(timers.begin()->second);
      timers.erase(timers.begin());
      fn();
    }
  }
  size_t HeldAt(const std::string& node) const {
    auto it = held.find(node);
    return it == held.end() ? 0 : it->second.size();
  }

  std::set<std::string> dead;
  std::map<std::string, std::deque<Held>> held;
  std::map<std::string, int> requests;
  std::vector<std::string> spilled_to;
  milliseconds now{0};
  std::multimap<milliseconds, std::function<void()>> timers;
};

// What the caller of Acquire heard.
struct Outcome {
  int calls = 0;
  bool granted = false;
  uint64_t lease_id = 0;
  std::string error;
};

LeaseRequester::Callback Record(Outcome& out) {
  return [&out](proto::LeaseReply::Reader reply, std::shared_ptr<Connection>) {
    ++out.calls;
    out.granted = reply.getGranted();
    out.lease_id = reply.getLeaseId();
    out.error = reply.getError().cStr();
  };
}

auto Grant(uint64_t lease_id) {
  return [lease_id](proto::LeaseReply::Builder r) {
    r.setGranted(true);
    r.setLeaseId(lease_id);
  };
}

auto SpillTo(const std::string& address) {
  return [address](proto::LeaseReply::Builder r) { r.setSpillbackAddress(address); };
}

LeaseShape Shape() {
  LeaseShape shape;
  shape.resources = {{"CPU", 1}};
  shape.name = "Work";
  return shape;
}

constexpr milliseconds kRetry{20};
constexpr milliseconds kSpillbackRetry{50};
LeaseRequester::Options Opts() { return {kRetry, kSpillbackRetry, 100}; }

TEST_CASE("a lease reply lost with our node ends in one refusal", "[worker][lease]") {
  // Invariant: when our node daemon goes away before answering, the caller
  // hears exactly one refusal naming it, and a reply arriving after the node
  // died reaches nobody.
  FakeNodes nodes;
  LeaseRequester leases(nodes, Opts());
  Outcome out;
  leases.Acquire(Shape(), Record(out));
  REQUIRE(nodes.HeldAt("") == 1);
  nodes.Kill("");
  REQUIRE(out.calls == 1);
  REQUIRE_FALSE(out.granted);
  REQUIRE(out.error == "lost the connection to the node daemon");
  REQUIRE_FALSE(nodes.Reply("", Grant(7)));  // the late reply: nobody listens
  REQUIRE(out.calls == 1);
}

TEST_CASE("a spillback target that dies before answering sends the request home",
          "[worker][lease]") {
  // Invariant: a request spilled to a node that dies with it held is asked
  // again of our node (not failed), and the caller hears only the final grant,
  // once; the dead node's late reply changes nothing.
  FakeNodes nodes;
  LeaseRequester leases(nodes, Opts());
  Outcome out;
  leases.Acquire(Shape(), Record(out));
  REQUIRE(nodes.Reply("", SpillTo("B")));
  REQUIRE(nodes.spilled_to == std::vector<std::string>{"B"});
  REQUIRE(nodes.HeldAt("B") == 1);
  REQUIRE(nodes.held["B"].front().grant_or_reject);
  nodes.Kill("B");
  REQUIRE(out.calls == 0);
  REQUIRE(nodes.HeldAt("") == 1);  // asked again at home, at once
  REQUIRE_FALSE(nodes.Reply("B", Grant(9)));
  REQUIRE(nodes.Reply("", Grant(3)));
  REQUIRE(out.calls == 1);
  REQUIRE(out.granted);
  REQUIRE(out.lease_id == 3);
}

TEST_CASE("a spillback to a node already dead retries at home after a delay",
          "[worker][lease]") {
  // Invariant: when the spillback target cannot be reached, our node is asked
  // again only after spillback_retry_delay (its view of the cluster catches
  // up), and nothing reaches the caller meanwhile.
  FakeNodes nodes;
  nodes.dead.insert("B");
  LeaseRequester leases(nodes, Opts());
  Outcome out;
  leases.Acquire(Shape(), Record(out));
  REQUIRE(nodes.Reply("", SpillTo("B")));
  REQUIRE(nodes.HeldAt("") == 0);
  nodes.Advance(kSpillbackRetry - milliseconds(1));
  REQUIRE(nodes.HeldAt("") == 0);
  nodes.Advance(milliseconds(1));
  REQUIRE(nodes.HeldAt("") == 1);
  REQUIRE(out.calls == 0);
  REQUIRE(nodes.Reply("", Grant(5)));
  REQUIRE(out.calls == 1);
  REQUIRE(out.lease_id == 5);
}

TEST_CASE("waiting notes keep the request open until its answer", "[worker][lease]") {
  // Invariant: "waiting" replies (nothing can run it yet) are not answers: the
  // same request stays open and only its final reply reaches the caller.
  FakeNodes nodes;
  LeaseRequester leases(nodes, Opts());
  Outcome out;
  leases.Acquire(Shape(), Record(out));
  auto waiting = [](proto::LeaseReply::Builder r) {
    r.setWaiting(true);
    r.setError("no node can run Work yet");
  };
  REQUIRE(nodes.Reply("", waiting));
  REQUIRE(nodes.Reply("", waiting));
  REQUIRE(nodes.requests[""] == 1);
  REQUIRE(out.calls == 0);
  REQUIRE(nodes.Reply("", Grant(11)));
  REQUIRE(out.calls == 1);
  REQUIRE(out.lease_id == 11);
}

TEST_CASE("retries stop after max_attempts with a refusal", "[worker][lease]") {
  // Invariant: a node that keeps answering "retry" is asked again after
  // retry_delay each time, and after max_attempts the caller hears one refusal.
  FakeNodes nodes;
  LeaseRequester leases(nodes, {kRetry, kSpillbackRetry, /*max_attempts=*/3});
  Outcome out;
  leases.Acquire(Shape(), Record(out));
  auto retry = [](proto::LeaseReply::Builder r) { r.setRetry(true); };
  for (int i = 0; i < 3; ++i) {
    REQUIRE(nodes.Reply("", retry));
    REQUIRE(nodes.HeldAt("") == 0);
    nodes.Advance(kRetry);
    REQUIRE(nodes.HeldAt("") == 1);
  }
  REQUIRE(nodes.Reply("", retry));
  REQUIRE(out.calls == 1);
  REQUIRE_FALSE(out.granted);
  REQUIRE(out.error.find("after 3 spillbacks and retries") != std::string::npos);
}

TEST_CASE("a refusal from our node is final", "[worker][lease]") {
  // Invariant: a plain refusal (granted false, no spillback, no retry) reaches
  // the caller once, with the node's reason.
  FakeNodes nodes;
  LeaseRequester leases(nodes, Opts());
  Outcome out;
  leases.Acquire(Shape(), Record(out));
  REQUIRE(nodes.Reply("", [](proto::LeaseReply::Builder r) { r.setError("infeasible"); }));
  REQUIRE(out.calls == 1);
  REQUIRE_FALSE(out.granted);
  REQUIRE(out.error == "infeasible");
  REQUIRE(nodes.HeldAt("") == 0);
}

}  // namespace
}  // namespace lumen::runtime
