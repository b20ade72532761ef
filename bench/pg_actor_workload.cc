// A fixed workload for profiling placement groups and actor creation (issue
// 13's placement_group_create/removal and actors_created_per_second): on an
// embedded cluster, after a warm-up, R rounds of the microbenchmark's
// placement-group round (100 groups of one bundle {"custom": 0.001} created,
// each waited for, all removed), then R rounds of its actor round (20 actors
// created, each answering one call; the handles go at the end of the round).
// Run under strace -f -c or perf with two different R and subtract: what
// remains is the cost of the extra rounds without start-up and shutdown.
//
//   pg_actor_workload [PG_ROUNDS [ACTOR_ROUNDS]]     (default 20 20)
//
// Prints each phase's rate (wall clock).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "lumen/lumen.h"

namespace {
struct Server {
  static Server* Create() { return new Server(); }
  int SmallValue() { return 1; }
};

void ActorRound(int n) {
  std::vector<lumen::ActorHandle<Server>> servers;
  std::vector<lumen::ObjectRef<int>> pings;
  for (int i = 0; i < n; ++i) {
    servers.push_back(lumen::Actor(Server::Create).Remote());
    pings.push_back(servers.back().Task(&Server::SmallValue).Remote());
  }
  int ok = 0;
  for (const auto& v : lumen::Get(pings)) ok += *v == 1;
  if (ok != n) {
    std::fprintf(stderr, "%d actors answered wrong\n", n - ok);
    std::exit(1);
  }
}

void GroupRound(int n) {
  std::vector<lumen::PlacementGroup> pgs;
  for (int i = 0; i < n; ++i) {
    pgs.push_back(lumen::CreatePlacementGroup({.bundles = {{{"custom", 0.001}}}}));
  }
  for (auto& pg : pgs) {
    if (!pg.Wait(std::chrono::seconds(30))) {
      std::fprintf(stderr, "a placement group was not placed\n");
      std::exit(1);
    }
  }
  for (auto& pg : pgs) lumen::RemovePlacementGroup(pg.GetID());
}
}  // namespace

LUMEN_REMOTE(Server::Create, &Server::SmallValue);

int main(int argc, char** argv) {
  lumen::Config config;
  config.object_store_memory = 256ull << 20;
  config.resources["custom"] = 100;
  lumen::Init(config, argc, argv);
  const int pg_rounds = argc > 1 ? std::atoi(argv[1]) : 20;
  const int actor_rounds = argc > 2 ? std::atoi(argv[2]) : 20;
  GroupRound(10);
  ActorRound(4);
  using Clock = std::chrono::steady_clock;
  auto t0 = Clock::now();
  for (int r = 0; r < pg_rounds; ++r) GroupRound(100);
  double pg_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  t0 = Clock::now();
  for (int r = 0; r < actor_rounds; ++r) ActorRound(20);
  double actor_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  if (pg_rounds > 0) {
    std::printf("placement groups: %d in %.3f s, %.0f/s\n", pg_rounds * 100, pg_seconds,
                pg_rounds * 100 / pg_seconds);
  }
  if (actor_rounds > 0) {
    std::printf("actors: %d in %.3f s, %.0f/s\n", actor_rounds * 20, actor_seconds,
                actor_rounds * 20 / actor_seconds);
  }
  lumen::Shutdown();
  return 0;
}
