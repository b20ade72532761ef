// Reliability item 9 for the object store's requests (doc/reliability.md): a
// driver's or worker's storeCreate, storeSeal, storeGet (and pullObject) whose
// answer is lost is sent again with the same RetryKey and request id, and the
// node's store (objectstore/store_repeats.h) answers the repeat from its table
// instead of acting again. The fault injector breaks the first three attempts
// of every such request of the driver (in each mode) and of the workers of
// the second node (their own rules): every value is right, every object is
// allocated once and pinned once per read, and once the refs go both stores
// are back to their baseline.
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "lumen/common/fault_injector.h"
#include "lumen/common/head_client.h"
#include "lumen/lumen.h"
#include "test/chaos/chaos_support.h"
#include "test/core/test_support.h"

namespace {

using lumen::FaultInjector;
using lumen::test::MultiNodeCluster;

constexpr int32_t kInts = 64 * 1024;  // 256 KiB: through the store, never inline

std::vector<int32_t> FillWith(int32_t value, int32_t n) { return std::vector<int32_t>(n, value); }
LUMEN_REMOTE(FillWith);

int64_t SumOf(std::vector<int32_t> values) {
  int64_t sum = 0;
  for (int32_t v : values) sum += v;
  return sum;
}
LUMEN_REMOTE(SumOf);

struct StoreState {
  uint64_t used = 0;
  uint64_t objects = 0;
  uint64_t pinned = 0;
  uint64_t repeats = 0;  // resent requests the store answered from its table
};

StoreState Read(const MultiNodeCluster& cluster, size_t node) {
  auto stats = lumen::runtime::QueryNodeStats(cluster.node_address(node));
  REQUIRE(stats.ok());
  return StoreState{stats->store_used, stats->store_objects, stats->store.pinned_objects,
                    stats->store.repeated_requests};
}

bool AtBaseline(const StoreState& now, const StoreState& base) {
  return now.used == base.used && now.objects == base.objects && now.pinned == base.pinned;
}

}  // namespace

TEST_CASE("RPC idempotency: store requests whose replies are lost are resent with their keys and "
          "act once",
          "[chaos]") {
  lumen::test::chaos::Seed seed;
  INFO("seed " << seed.value());
  lumen::test::chaos::LeakCheck leaks;
  {
    // Node 1's workers break the first three attempts of each of their store
    // requests (task results, arguments pulled from node 0), every mode at once.
    const std::string worker_rules =
        "storeCreate:drop_reply:1,storeSeal:fail_in_flight:1,storeGet:drop_reply:1,"
        "pullObject:fail_before_send:1";
    MultiNodeCluster cluster(
        {{{{"CPU", 2}}},
         {{{"CPU", 2}},
          384ull << 20,
          {{"LUMEN_FAULT_INJECT", worker_rules},
           {"LUMEN_FAULT_SEED", std::to_string(seed.value())}}}});
    const auto node1 = lumen::NodeAffinity(cluster.node_id(1), /*soft=*/false);
    const StoreState base0 = Read(cluster, 0);
    const StoreState base1 = Read(cluster, 1);
    uint64_t repeats0 = base0.repeats;
    // A failed REQUIRE leaves the loop early: the later cases of chaos_test
    // must not run with store faults on.
    struct InjectorOff {
      ~InjectorOff() { FaultInjector::Configure("", 0).IgnoreError(); }
    } injector_off;
    for (const std::string mode : {"drop_reply", "fail_before_send", "fail_in_flight"}) {
      INFO("mode " << mode);
      REQUIRE(FaultInjector::Configure("storeCreate:" + mode + ":1,storeSeal:" + mode +
                                           ":1,storeGet:" + mode + ":1,pullObject:" + mode + ":1",
                                       seed.value())
                  .ok());
      {
        // Puts (create, seal) and gets of the driver, on node 0.
        std::vector<lumen::ObjectRef<std::vector<int32_t>>> puts;
        for (int32_t i = 0; i < 4; ++i) puts.push_back(lumen::Put(FillWith(i + 1, kInts)));
        for (int32_t i = 0; i < 4; ++i) {
          auto got = lumen::Get(puts[i], std::chrono::seconds(30));
          REQUIRE(got->size() == static_cast<size_t>(kInts));
          CHECK(SumOf(*got) == int64_t{kInts} * (i + 1));
        }
        // Node 1's workers pull the puts and read them; their results are
        // stored on node 1, and the driver pulls and reads them.
        std::vector<lumen::ObjectRef<int64_t>> sums;
        std::vector<lumen::ObjectRef<std::vector<int32_t>>> made;
        for (int32_t i = 0; i < 4; ++i) {
          sums.push_back(lumen::Task(SumOf).SetSchedulingStrategy(node1).Remote(puts[i]));
          made.push_back(
              lumen::Task(FillWith).SetSchedulingStrategy(node1).Remote(i + 10, kInts));
        }
        for (int32_t i = 0; i < 4; ++i) {
          CHECK(*lumen::Get(sums[i], std::chrono::seconds(30)) == int64_t{kInts} * (i + 1));
          for (int read = 0; read < 2; ++read) {
            auto got = lumen::Get(made[i], std::chrono::seconds(30));
            REQUIRE(got->size() == static_cast<size_t>(kInts));
            CHECK(SumOf(*got) == int64_t{kInts} * (i + 10));
          }
        }
        // The first three attempts of each request were broken.
        CHECK(FaultInjector::Fired("storeCreate") == 4 * 3);
        CHECK(FaultInjector::Fired("storeSeal") == 4 * 3);
        CHECK(FaultInjector::Fired("storeGet") >= 8 * 3);
        CHECK(FaultInjector::Fired("pullObject") >= 4 * 3);
      }
      REQUIRE(FaultInjector::Configure("", 0).ok());
      // Once the refs are gone: one allocation per object, freed once, no pin
      // left on either node (a second create or pin would hold bytes).
      StoreState now0, now1;
      CHECK(lumen::test::WaitUntil([&] {
        now0 = Read(cluster, 0);
        now1 = Read(cluster, 1);
        return AtBaseline(now0, base0) && AtBaseline(now1, base1);
      }));
      INFO("node 0: " << now0.used << " bytes, " << now0.objects << " objects, " << now0.pinned
                      << " pinned (baseline " << base0.used << ", " << base0.objects << ", "
                      << base0.pinned << ")");
      INFO("node 1: " << now1.used << " bytes, " << now1.objects << " objects, " << now1.pinned
                      << " pinned (baseline " << base1.used << ", " << base1.objects << ", "
                      << base1.pinned << ")");
      CHECK(AtBaseline(now0, base0));
      CHECK(AtBaseline(now1, base1));
      // Node 0 serves only the driver's store requests. A lost answer's three
      // resends carry the first key: each is answered from the table (4
      // creates, 4 seals, at least 8 gets); a request never written is
      // acted on at its first arrival (its fourth attempt), none repeated.
      const uint64_t repeated = now0.repeats - repeats0;
      repeats0 = now0.repeats;
      INFO("node 0 answered " << repeated << " repeats");
      if (std::string(mode) == "fail_before_send") {
        CHECK(repeated == 0);
      } else {
        CHECK(repeated >= 3 * (4 + 4 + 8));
      }
    }
    // Node 1's workers resent theirs with their keys too.
    CHECK(Read(cluster, 1).repeats >= 3 * 3 * 4);
  }
  CHECK(leaks.Leaks("") == "");
}
