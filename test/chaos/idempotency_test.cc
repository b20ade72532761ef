// Reliability item 9 (doc/reliability.md): retried control requests. The
// driver's fault injector (lumen/common/fault_injector.h) breaks the first
// attempt of each request to the head in one of three ways; the retry carries
// the same key and the head (core/head/request_deduplicator.h) acts once. The
// same for lease requests to a node daemon (core/node/keyed_requests.h).
#include <catch2/catch.hpp>
#include <chrono>
#include <string>
#include <unistd.h>

#include "lumen/common/fault_injector.h"
#include "lumen/common/head_client.h"
#include "lumen/kv.h"
#include "lumen/lumen.h"
#include "test/chaos/chaos_support.h"
#include "test/core/test_support.h"
#include "test/head/http_get.h"

namespace {

using lumen::FaultInjector;
using lumen::test::MultiNodeCluster;

class Named {
 public:
  static Named* Create() { return new Named(); }
  int Pid() { return static_cast<int>(::getpid()); }
};

LUMEN_REMOTE(Named::Create, &Named::Pid);

int Cube(int x) { return x * x * x; }
LUMEN_REMOTE(Cube);

// lumen_head_repeated_requests_total from the head's /metrics, or -1.
long Repeated(const MultiNodeCluster& cluster) {
  auto [status, body] = lumen::test::HttpGet("127.0.0.1", cluster.head_metrics_port(), "/metrics");
  if (status != 200) return -1;
  const std::string name = "\nlumen_head_repeated_requests_total ";
  auto at = body.find(name);
  if (at == std::string::npos) return -1;
  return std::atol(body.c_str() + at + name.size());
}

// The groups the head lists with `id`.
int GroupsWithId(const std::string& head, const std::string& id, std::string* state) {
  auto groups = lumen::runtime::QueryPlacementGroups(head);
  REQUIRE(groups.ok());
  int n = 0;
  for (const auto& g : *groups) {
    if (g.id != id) continue;
    ++n;
    *state = g.state;
  }
  return n;
}

}  // namespace

TEST_CASE("RPC idempotency: a control request whose first attempt fails acts once and answers right",
          "[chaos]") {
  // Invariants (reliability item 9), for each injected fault (fail before
  // send, fail in flight, drop the reply after the head acted) on the first
  // attempt of each request: creating a placement group makes exactly one
  // group and returns its id (the head also takes a create of a known id as
  // the same group: the id is the client's);
  // creating a named actor registers the name once (one actor answers to it;
  // acting on the resent registration again would fail it with "already
  // exists"); removing the group and killing the actor (its name freed
  // through the io thread's HeadRequester) take effect once; key-value writes
  // (keyed too) act once: a put-if-absent answers "added" once and a second
  // one "not added", a delete answers "deleted"; a get is retried to the
  // right answer. Retries reuse the key: the
  // head counts the repeats it answered from its table (0 when nothing
  // reached it twice).
  lumen::test::chaos::Seed seed;
  INFO("seed " << seed.value());
  lumen::test::chaos::LeakCheck leaks;
  {
    MultiNodeCluster cluster({{{{"CPU", 2}}}});
    const std::string head = cluster.head_address();
    long repeated = Repeated(cluster);
    REQUIRE(repeated == 0);
    for (const std::string mode : {"fail_before_send", "fail_in_flight", "drop_reply"}) {
      INFO("mode " << mode);
      const std::string rules = "createPlacementGroup:" + mode + ":1:1,registerActorName:" + mode +
                                ":1:1,removePlacementGroup:" + mode + ":1:1,unregisterActorName:" +
                                mode + ":1:1,kv:" + mode + ":1:4";
      REQUIRE(FaultInjector::Configure(rules, seed.value()).ok());

      auto pg = lumen::CreatePlacementGroup({.bundles = {{{"CPU", 1}}}});
      CHECK(FaultInjector::Fired("createPlacementGroup") == 1);
      REQUIRE(pg.Wait(std::chrono::seconds(10)));
      std::string state;
      CHECK(GroupsWithId(head, pg.GetID(), &state) == 1);
      CHECK(state == "CREATED");

      const std::string name = "idem-" + mode;
      auto actor = lumen::Actor(Named::Create).SetName(name).Remote();
      CHECK(FaultInjector::Fired("registerActorName") == 1);
      int pid = *lumen::Get(actor.Task(&Named::Pid).Remote(), std::chrono::seconds(20));
      CHECK(*lumen::Get(lumen::GetActor<Named>(name).Task(&Named::Pid).Remote()) == pid);

      // Key-value writes carry a retry key too: each is resent after a
      // failed attempt and acts once. Without the key a resent
      // put-if-absent would answer "not added" and a resent delete "nothing
      // deleted" (the first attempt did it); a get is simply retried.
      const std::string key = "k-" + mode;
      CHECK(lumen::kv::Put(key, "v", "idem", /*overwrite=*/false));   // added, once
      CHECK_FALSE(lumen::kv::Put(key, "w", "idem", /*overwrite=*/false));  // there already
      CHECK(lumen::kv::Get(key, "idem") == std::optional<std::string>("v"));
      CHECK(lumen::kv::Delete(key, "idem"));                            // deleted, once
      CHECK(FaultInjector::Fired("kv") == 4);
      CHECK_FALSE(lumen::kv::Get(key, "idem").has_value());

      lumen::RemovePlacementGroup(pg.GetID());
      CHECK(GroupsWithId(head, pg.GetID(), &state) <= 1);
      CHECK(lumen::test::WaitUntil([&] {
        std::string s;
        return GroupsWithId(head, pg.GetID(), &s) == 0 || s == "REMOVED";
      }));
      actor.Kill();
      // The name is freed once the unregister (sent from the io thread) lands.
      REQUIRE(lumen::test::WaitUntil([&] {
        try {
          lumen::GetActor<Named>(name);
          return false;
        } catch (const lumen::Error&) {
          return true;
        }
      }));
      CHECK(FaultInjector::Fired("removePlacementGroup") == 1);
      // (The rule may have fired on a late second release of the previous
      // mode's actor's name; either way one release went through a fault.)
      CHECK(FaultInjector::Fired("unregisterActorName") == 1);
      // What reached the head twice was answered from its table: the create
      // and the name's registration and release, and (the reply dropped after
      // the head acted, so it surely reached it twice) the three key-value
      // writes (fail_before_send: nothing).
      long now = Repeated(cluster);
      if (mode == "fail_before_send") {
        CHECK(now == repeated);
      } else if (mode == "drop_reply") {
        CHECK(now >= repeated + 2 + 3);
      } else {
        CHECK(now >= repeated + 2);
      }
      repeated = now;
    }
    REQUIRE(FaultInjector::Configure("", 0).ok());
  }
  CHECK(leaks.Leaks("") == "");
}

TEST_CASE("RPC idempotency: a lease request whose reply is lost is resent with its key and holds "
          "one lease",
          "[chaos]") {
  // Invariants (reliability item 9, node daemons): every lease request of the
  // driver has its first three attempts broken (fail before send, or the
  // node's answer thrown away after the node granted it); each resend carries
  // the same key, and the node answers a repeat with its first answer instead
  // of granting again. So 12 tasks on 2 CPUs all finish with the right
  // results, an actor gets one worker, and once idle the node is back to all
  // CPUs free with only the actor's lease held: a second grant per resend
  // would hold leases no one returns (and with 2 CPUs the third resend would
  // wait forever).
  lumen::test::chaos::Seed seed;
  INFO("seed " << seed.value());
  lumen::test::chaos::LeakCheck leaks;
  {
    MultiNodeCluster cluster({{{{"CPU", 2}}}});
    for (const std::string mode : {"drop_reply", "fail_before_send", "fail_in_flight"}) {
      INFO("mode " << mode);
      REQUIRE(FaultInjector::Configure("requestLease:" + mode + ":1", seed.value()).ok());
      std::vector<lumen::ObjectRef<int>> refs;
      for (int i = 0; i < 12; ++i) refs.push_back(lumen::Task(Cube).Remote(i));
      for (int i = 0; i < 12; ++i) CHECK(*lumen::Get(refs[i], std::chrono::seconds(30)) == i * i * i);
      auto actor = lumen::Actor(Named::Create).Remote();
      CHECK(*lumen::Get(actor.Task(&Named::Pid).Remote(), std::chrono::seconds(30)) > 0);
      const uint64_t fired = FaultInjector::Fired("requestLease");
      CHECK(fired >= 2 * 3);  // a task lease and the actor's at least, three times each
      REQUIRE(FaultInjector::Configure("", 0).ok());
      lumen::test::chaos::ClusterUsage usage;
      CHECK(lumen::test::WaitUntil([&] {
        usage = lumen::test::chaos::ReadClusterUsage();
        return usage.free_cpus == usage.total_cpus && usage.active_leases == 1;
      }));
      INFO("free " << usage.free_cpus << " of " << usage.total_cpus << ", leases "
                   << usage.active_leases);
      CHECK(usage.active_leases == 1);
      actor.Kill();
      CHECK(lumen::test::WaitUntil([&] {
        return lumen::test::chaos::ReadClusterUsage().active_leases == 0;
      }));
    }
  }
  CHECK(leaks.Leaks("") == "");
}
