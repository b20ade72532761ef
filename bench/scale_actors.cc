// actors (Ray's many_actors), puts and store_puts: per-item time and memory.
#include <malloc.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "bench/check.h"
#include "bench/process_stats.h"
#include "bench/remote_calls.h"
#include "bench/scale_cluster.h"
#include "bench/scale_experiments.h"
#include "bench/small_objects.h"
#include "lumen/common/head_client.h"
#include "lumen/lumen.h"

namespace lumen::bench {
namespace {

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

long WorkersPss(const std::vector<pid_t>& daemons) {
  long kib = 0;
  for (pid_t daemon : daemons) {
    for (pid_t child : ChildrenOf(daemon)) kib += PssKiB(child);
  }
  return kib;
}

long RssKiBOfAll(const std::vector<pid_t>& daemons) {
  long kib = 0;
  for (pid_t daemon : daemons) kib += RssKiB(daemon);
  return kib;
}

// Polls (every 50 ms, up to `timeout`) until `done` holds; false if it never did.
template <typename Done>
bool WaitUntil(Done done, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return true;
}

void Note(Reporter& out, const char* format, double a, double b = 0, double c = 0,
          double d = 0, double e = 0, double f = 0) {
  char text[320];
  std::snprintf(text, sizeof(text), format, a, b, c, d, e, f);
  out.Note(text);
}

}  // namespace

void RunActorScale(ScaleContext& context) {
  Reporter& out = context.out;
  const long wanted = context.options.quick ? 1000 : 10000;
  constexpr long kProbe = 20;
  // A node daemon holds three descriptors per worker (its connection and the
  // stdout/stderr pipes), so `wanted` actors are spread over as many nodes as
  // the file limit needs (one where it allows, as Ray's many_actors on one node).
  const long per_node_by_files = std::max(1L, (OpenFileLimit() - 1000) / 3);
  const int nodes = static_cast<int>(std::clamp((wanted + per_node_by_files - 1) / per_node_by_files, 1L, 4L));
  std::unique_ptr<BenchCluster> cluster;
  if (!out.Step("actors", [&] {
        cluster = StartAndConnect({.nodes = nodes,
                                   .resources = {{"CPU", 2.0}},
                                   .join_timeout = context.wait_timeout});
      })) {
    return;
  }
  const std::vector<pid_t> daemons = cluster->node_pids();
  out.Value("actors_seconds_per_actor", "s", [&] {
    // Each node keeps a pool of prestarted workers for this driver's job
    // (LUMEN_PRESTART_WORKERS, default its CPUs: 2 here) and refills it after
    // an actor takes one: let it fill first, so that the count once the actors
    // are gone compares with a full pool.
    long pool = 2;
    if (const char* v = std::getenv("LUMEN_PRESTART_WORKERS"); v != nullptr && *v != '\0') {
      pool = std::max(0L, std::atol(v));
    }
    // Only the driver's node has them yet (a node starts a job's worker
    // template and pool when the job first runs there), so wait for one node's.
    WaitUntil(
        [&] {
          return std::any_of(daemons.begin(), daemons.end(), [&](pid_t daemon) {
            return ChildrenOf(daemon).size() >= static_cast<size_t>(pool);
          });
        },
        context.wait_timeout);
    // What each node may keep once the actors are gone: what it had, or, on a
    // node the job had not used yet, the job's worker template and the pool
    // it prestarts once an actor ran there.
    std::vector<size_t> children_after_limit;
    for (pid_t daemon : daemons) {
      children_after_limit.push_back(
          std::max(ChildrenOf(daemon).size(), static_cast<size_t>(pool) + 1));
    }
    const long pss_before = WorkersPss(daemons), driver_before = RssKiB(),
               daemon_before = RssKiBOfAll(daemons);
    std::vector<ActorHandle<Server>> actors;
    std::vector<ObjectRef<int>> pings;
    auto start = std::chrono::steady_clock::now();
    auto create = [&](long count) {
      for (long i = 0; i < count; ++i) {
        actors.push_back(nodes > 1 ? Actor(Server::Create).SetSchedulingStrategy(Spread()).Remote()
                                   : Actor(Server::Create).Remote());
        pings.push_back(actors.back().Task(&Server::SmallValue).Remote());
      }
    };
    // A few first, to learn what one costs, then as many as the machine holds.
    create(kProbe);
    Check(CountEqual(Get(pings), 1) == kProbe, "an actor answered wrong");
    const double probe_kib = static_cast<double>(WorkersPss(daemons) - pss_before) / kProbe;
    // The machine is shared: at most a share (LUMEN_SCALE_ACTORS_SHARE, default
    // a third) of its free memory and of its process ids (one per thread), and
    // the driver's file descriptors.
    double share = 1.0 / 3.0;
    if (const char* v = std::getenv("LUMEN_SCALE_ACTORS_SHARE"); v != nullptr && *v != '\0') {
      share = std::clamp(std::atof(v), 0.01, 0.9);
    }
    const long by_memory =
        static_cast<long>(AvailableMemoryKiB() * share / std::max(1.0, probe_kib));
    long threads = 0;
    for (pid_t child : ChildrenOf(daemons.front())) threads = std::max(threads, ThreadsOf(child));
    const long by_pids = static_cast<long>(PidLimit() * share) / std::max(1L, threads);
    // The driver holds one connection per actor (the link that created it
    // carries its calls too); each daemon three descriptors per worker. At
    // the limit a connection fails (EMFILE) and the calls waiting for it fail.
    const long by_files = std::min(OpenFileLimit() - 1000, per_node_by_files * nodes);
    const long count = std::max(kProbe, std::min({wanted, by_memory, by_pids, by_files}));
    if (count < wanted) {
      Note(out,
           "actors: %.0f instead of %.0f: each takes %.0f KiB (PSS), %.0f process ids "
           "(threads) and 1 of the driver's %.0f file descriptors; this run uses at most "
           "%.0f %% of the free memory and of the pids (LUMEN_SCALE_ACTORS_SHARE)",
           static_cast<double>(count), static_cast<double>(wanted), probe_kib,
           static_cast<double>(threads), static_cast<double>(OpenFileLimit()), share * 100);
    }
    create(count - kProbe);
    Check(CountEqual(Get(pings), 1) == count, "an actor answered wrong");
    const double seconds = SecondsSince(start);
    const double worker_kib = static_cast<double>(WorkersPss(daemons) - pss_before);
    const double driver_kib = static_cast<double>(RssKiB() - driver_before);
    const double daemon_kib = static_cast<double>(RssKiBOfAll(daemons) - daemon_before);
    Note(out,
         "actors: %.0f created and called once in %.1f s; per actor: %.0f KiB in its worker "
         "(PSS), %.1f KiB in the driver",
         static_cast<double>(count), seconds, worker_kib / count, driver_kib / count);
    Note(out, "actors: per actor %.1f KiB in the node daemons (%.0f nodes)", daemon_kib / count,
         static_cast<double>(nodes));
    context.table.Add({.experiment = "actors",
                       .n = count,
                       .seconds = seconds,
                       .rate = count / seconds,
                       .driver_kib = driver_kib,
                       .daemon_kib = daemon_kib,
                       .note = "worker PSS per actor " + std::to_string(worker_kib / count) +
                               " KiB"});
    actors.clear();
    pings.clear();
    const bool gone = WaitUntil(
        [&] {
          for (size_t i = 0; i < daemons.size(); ++i) {
            if (ChildrenOf(daemons[i]).size() > children_after_limit[i]) return false;
          }
          return true;
        },
        context.wait_timeout);
    Check(gone, "the actors' workers did not exit once their handles were gone");
    return seconds / count;
  });
  Shutdown();
  cluster->Stop();
}

void RunPutScale(ScaleContext& context) {
  Reporter& out = context.out;
  const long n = context.options.quick ? 100000 : 1000000;
  std::unique_ptr<BenchCluster> cluster;
  if (!out.Step("puts", [&] {
        cluster = StartAndConnect(
            {.nodes = 1, .resources = {{"CPU", 2.0}}, .join_timeout = context.wait_timeout});
      })) {
    return;
  }
  const pid_t daemon = cluster->node_pids().at(0);
  out.Value("puts_seconds", "s", [&] {
    auto store_objects = [&] {
      auto nodes = runtime::QueryNodes(cluster->head_address());
      Check(nodes.ok() && !nodes->empty(), "cannot read the node's store");
      auto stats = runtime::QueryNodeStats(nodes->front().address);
      Check(stats.ok(), "cannot read the node's store");
      return std::pair<uint64_t, uint64_t>(stats->store_objects, stats->store_used);
    };
    ::malloc_trim(0);
    const auto store_before = store_objects();
    const long driver_before = RssKiB(), daemon_before = RssKiB(daemon);
    ResetPeakRss();
    auto start = std::chrono::steady_clock::now();
    {
      std::vector<ObjectRef<int>> refs;
      refs.reserve(static_cast<size_t>(n));
      for (long i = 0; i < n; ++i) refs.push_back(Put(static_cast<int>(i)));
      Check(*Get(refs[n / 2]) == n / 2, "a Put object read back wrong");
    }
    const double seconds = SecondsSince(start);
    const long driver_peak = PeakRssKiB();
    ::malloc_trim(0);
    const long driver_after = RssKiB(), daemon_after = RssKiB(daemon);
    const auto store_after = store_objects();
    Note(out,
         "puts: %.0f small objects Put then freed in %.2f s; owner peak %.0f B per object over "
         "its baseline, %.0f KiB over it once freed",
         static_cast<double>(n), seconds,
         static_cast<double>(driver_peak - driver_before) * 1024 / n,
         static_cast<double>(driver_after - driver_before));
    Note(out,
         "puts: node daemon %.0f KiB over its baseline once freed; store objects %.0f before, "
         "%.0f after (bytes used before/after: %.0f)",
         static_cast<double>(daemon_after - daemon_before),
         static_cast<double>(store_before.first), static_cast<double>(store_after.first),
         static_cast<double>(store_after.second) - static_cast<double>(store_before.second));
    context.table.Add({.experiment = "puts",
                       .n = n,
                       .seconds = seconds,
                       .rate = n / seconds,
                       .driver_kib = static_cast<double>(driver_peak - driver_before),
                       .daemon_kib = static_cast<double>(daemon_after - daemon_before),
                       .note = "owner after free " + std::to_string(driver_after - driver_before) +
                               " KiB over baseline"});
    Check(store_after.first <= store_before.first, "the store kept objects after they were freed");
    Check(driver_after - driver_before < std::max(4096L, (driver_peak - driver_before) / 10),
          "the owner kept " + std::to_string(driver_after - driver_before) +
              " KiB after its objects were freed");
    return seconds;
  });
  Shutdown();
  cluster->Stop();
}

// One million small objects in one node's store, every reference held: the
// node daemon's memory per object (issue 11: <= 256 B).
void RunStorePutScale(ScaleContext& context) {
  Reporter& out = context.out;
  const long n = context.options.quick ? 100000 : 1000000;
  std::unique_ptr<BenchCluster> cluster;
  if (!out.Step("store_puts", [&] {
        cluster = StartAndConnect({.nodes = 1,
                                   .resources = {{"CPU", 1.0}},
                                   .object_store_bytes = 1ull << 30,
                                   .join_timeout = context.wait_timeout});
      })) {
    return;
  }
  const pid_t daemon = cluster->node_pids().at(0);
  out.Value("store_puts_bytes_per_object", "B", [&] {
    // 8 putting threads: one thread's put after put is two round trips each,
    // latency-bound (~600 us a put on a loaded 2-core machine: 1M did not
    // finish in 600 s), while the per-object memory does not depend on it.
    SmallObjectCost cost = MeasureSmallObjects(daemon, n, kSmallObjectPutThreads);
    Note(out,
         "store_puts: %.0f small objects in one node's store in %.2f s; node daemon RssAnon "
         "%.0f -> %.0f KiB",
         static_cast<double>(n), cost.seconds, static_cast<double>(cost.daemon_kib_before),
         static_cast<double>(cost.daemon_kib_after));
    context.table.Add({.experiment = "store_puts",
                       .n = n,
                       .seconds = cost.seconds,
                       .rate = n / cost.seconds,
                       .daemon_kib = static_cast<double>(cost.daemon_kib_after -
                                                         cost.daemon_kib_before),
                       .note = "daemon bytes per object " +
                               std::to_string(static_cast<long>(cost.bytes_per_object))});
    return cost.bytes_per_object;
  });
  Shutdown();
  cluster->Stop();
}

}  // namespace lumen::bench
