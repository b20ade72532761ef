#include "bench/microbenchmark.h"

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <thread>

#include "absl/strings/numbers.h"
#include "core/runtime/cluster.h"
#include "lumen/common/head_client.h"
#include "lumen/common/process.h"
#include "lumen/lumen.h"
#include "lumen/objectstore/transfer.h"

namespace lumen::bench {
namespace {

int Noop() { return 0; }
int Echo(int x) { return x; }

class Pinger {
 public:
  static Pinger* Create() { return new Pinger(); }
  int Ping() { return ++calls_; }
  int PingWith(int x) { return calls_ += x; }

 private:
  int calls_ = 0;
};

// Runs in a worker: creates its own actor and calls it `calls` times
// asynchronously (the n:n benchmarks run several of these at once).
int ClientOfOwnActor(int calls, bool with_arg) {
  auto actor = Actor(Pinger::Create).Remote();
  Get(actor.Task(&Pinger::Ping).Remote());  // created
  auto arg = Put(1);
  std::vector<ObjectRef<int>> refs;
  refs.reserve(calls);
  for (int i = 0; i < calls; ++i) {
    refs.push_back(with_arg ? actor.Task(&Pinger::PingWith).Remote(arg)
                            : actor.Task(&Pinger::Ping).Remote());
  }
  Get(refs);
  return calls;
}

// A `bytes`-long array made where it runs (for the cross-node transfer).
std::vector<uint8_t> MakeBytes(uint64_t bytes) { return std::vector<uint8_t>(bytes, 1); }

}  // namespace
}  // namespace lumen::bench

LUMEN_REMOTE(lumen::bench::MakeBytes);
LUMEN_REMOTE(lumen::bench::Noop, lumen::bench::Echo, lumen::bench::Pinger::Create,
             &lumen::bench::Pinger::Ping, &lumen::bench::Pinger::PingWith,
             lumen::bench::ClientOfOwnActor);

namespace lumen::bench {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

void Report(const char* name, double value, const char* unit) {
  std::printf("%s %.4g %s\n", name, value, unit);
  std::fflush(stdout);
}

// Runs `batch` repeatedly for about `budget` seconds; returns units per second,
// where each call of `batch` does `units` units.
double Rate(double budget, double units, const std::function<void()>& batch) {
  batch();  // warm up
  auto start = Clock::now();
  double done = 0;
  do {
    batch();
    done += units;
  } while (Seconds(start) < budget);
  return done / Seconds(start);
}

void AsyncTasks(int n) {
  std::vector<ObjectRef<int>> refs;
  refs.reserve(n);
  for (int i = 0; i < n; ++i) refs.push_back(Task(Noop).Remote());
  Get(refs);
}

// A second driver process for multi_client_tasks_async: prints how many tasks
// it finished between which two wall-clock instants (ns), so that the parent
// divides all tasks by the span in which any client ran.
int RunClient(double budget) {
  Init(Config{});
  AsyncTasks(1000);  // warm up
  auto wall = [] {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  };
  long long begin = wall();
  auto start = Clock::now();
  long long tasks = 0;
  do {
    AsyncTasks(1000);
    tasks += 1000;
  } while (Seconds(start) < budget);
  std::printf("%lld %lld %lld\n", tasks, begin, static_cast<long long>(wall()));
  Shutdown();
  return 0;
}

}  // namespace

int RunMultiNode(bool quick, double budget);
int RunCollectiveBench(bool quick);

int RunMicrobenchmark(int argc, char** argv) {
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--quick") quick = true;
    if (arg == "--client") {
      double budget = 1;
      if (i + 1 < argc) (void)absl::SimpleAtod(argv[i + 1], &budget);
      return RunClient(budget);
    }
  }
  const double budget = quick ? 0.5 : 2.0;
  const size_t big_bytes = quick ? (256ull << 20) : (1ull << 30);

  auto start = Clock::now();
  Config config;
  config.object_store_memory = 4 * big_bytes;
  Init(config);
  Report("init_seconds", Seconds(start), "s");

  Report("single_client_tasks_sync",
         Rate(budget, 1, [] { *Get(Task(Noop).Remote()); }), "tasks/s");
  Report("single_client_tasks_async", Rate(budget, 10000, [] { AsyncTasks(10000); }), "tasks/s");

  {
    // Two more driver processes joined to this cluster, submitting at once.
    // The clients join this embedded cluster through LUMEN_ADDRESS.
    ::setenv("LUMEN_ADDRESS", internal::ClusterAddress().c_str(), 1);
    std::vector<int> pipes;
    std::vector<pid_t> pids;
    for (int c = 0; c < 2; ++c) {
      int fds[2];
      if (::pipe(fds) != 0) break;
      pid_t pid = ::fork();
      if (pid == 0) {
        ::dup2(fds[1], STDOUT_FILENO);
        ::close(fds[0]);
        std::string self = SelfExecutablePath();
        std::string b = std::to_string(budget);
        ::execl(self.c_str(), self.c_str(), "microbenchmark", "--client", b.c_str(),
                static_cast<char*>(nullptr));
        std::_Exit(127);
      }
      ::close(fds[1]);
      pipes.push_back(fds[0]);
      pids.push_back(pid);
    }
    ::unsetenv("LUMEN_ADDRESS");
    long long total = 0, first = 0, last = 0;
    for (size_t c = 0; c < pids.size(); ++c) {
      std::string out;
      char buf[256];
      ssize_t n;
      while ((n = ::read(pipes[c], buf, sizeof(buf))) > 0) out.append(buf, n);
      ::close(pipes[c]);
      ::waitpid(pids[c], nullptr, 0);
      long long tasks = 0, begin = 0, end = 0;
      if (std::sscanf(out.c_str(), "%lld %lld %lld", &tasks, &begin, &end) == 3) {
        total += tasks;
        first = first == 0 ? begin : std::min(first, begin);
        last = std::max(last, end);
      }
    }
    double span = static_cast<double>(last - first) / 1e9;
    Report("multi_client_tasks_async", span > 0 ? static_cast<double>(total) / span : 0, "tasks/s");
  }

  Report("single_client_tasks_and_get_batch", Rate(budget, 1, [] { AsyncTasks(1000); }),
         "batches/s");
  Report("single_client_put_calls_Plasma_Store", Rate(budget, 1000, [] {
           for (int i = 0; i < 1000; ++i) Put(i);
         }),
         "puts/s");
  {
    auto ref = Put(std::vector<int>(64, 7));
    Report("single_client_get_calls_Plasma_Store", Rate(budget, 1000, [&] {
             for (int i = 0; i < 1000; ++i) Get(ref);
           }),
           "gets/s");
  }
  {
    std::vector<uint8_t> data(big_bytes, 1);
    double gbps = Rate(budget, static_cast<double>(big_bytes) / 1e9, [&] { Put(data); });
    Report("single_client_put_gigabytes", gbps, "GB/s");
    std::vector<uint8_t> dest(big_bytes, 0);
    double memcpy_gbps = Rate(budget, static_cast<double>(big_bytes) / 1e9, [&] {
      std::memcpy(dest.data(), data.data(), big_bytes);
      asm volatile("" : : "r"(dest.data()) : "memory");
    });
    Report("memcpy_gigabytes", memcpy_gbps, "GB/s");
  }
  {
    auto actor = Actor(Pinger::Create).Remote();
    Report("1_1_actor_calls_sync",
           Rate(budget, 1, [&] { *Get(actor.Task(&Pinger::Ping).Remote()); }), "calls/s");
    Report("1_1_actor_calls_async", Rate(budget, 10000, [&] {
             std::vector<ObjectRef<int>> refs;
             refs.reserve(10000);
             for (int i = 0; i < 10000; ++i) refs.push_back(actor.Task(&Pinger::Ping).Remote());
             Get(refs);
           }),
           "calls/s");
    auto concurrent = Actor(Pinger::Create).SetMaxConcurrency(4).Remote();
    Report("1_1_actor_calls_concurrent", Rate(budget, 5000, [&] {
             std::vector<ObjectRef<int>> refs;
             refs.reserve(5000);
             for (int i = 0; i < 5000; ++i) {
               refs.push_back(concurrent.Task(&Pinger::Ping).Remote());
             }
             Get(refs);
           }),
           "calls/s");
    const int n = 4;
    std::vector<ActorHandle<Pinger>> actors;
    for (int i = 0; i < n; ++i) actors.push_back(Actor(Pinger::Create).Remote());
    Report("1_n_actor_calls_async", Rate(budget, 10000, [&] {
             std::vector<ObjectRef<int>> refs;
             refs.reserve(10000);
             for (int i = 0; i < 10000; ++i) {
               refs.push_back(actors[i % n].Task(&Pinger::Ping).Remote());
             }
             Get(refs);
           }),
           "calls/s");
  }
  for (bool with_arg : {false, true}) {
    const int clients = 2, calls = quick ? 5000 : 20000;
    Report(with_arg ? "n_n_actor_calls_with_arg_async" : "n_n_actor_calls_async",
           Rate(budget, clients * calls, [&] {
             std::vector<ObjectRef<int>> done;
             for (int c = 0; c < clients; ++c) {
               done.push_back(Task(ClientOfOwnActor).Remote(calls, with_arg));
             }
             Get(done);
           }),
           "calls/s");
  }
  Report("actors_created_per_second", Rate(budget, 20, [] {
           std::vector<ActorHandle<Pinger>> actors;
           std::vector<ObjectRef<int>> pings;
           for (int i = 0; i < 20; ++i) {
             actors.push_back(Actor(Pinger::Create).Remote());
             pings.push_back(actors.back().Task(&Pinger::Ping).Remote());
           }
           Get(pings);
         }),
         "actors/s");
  Report("single_client_wait_1k_refs", Rate(budget, 1, [] {
           std::vector<ObjectRef<int>> refs;
           refs.reserve(1000);
           for (int i = 0; i < 1000; ++i) refs.push_back(Task(Echo).Remote(i));
           Wait(refs, refs.size());
         }),
         "waits/s");
  Shutdown();
  int rc = RunMultiNode(quick, budget);
  if (rc == 0) rc = RunCollectiveBench(quick);
  return rc;
}

// The collective metrics come from lumen-collective-bench (it needs Gloo and
// lumen::train), run from this binary's directory when it was built there.
int RunCollectiveBench(bool quick) {
  char self[4096] = {0};
  ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return 0;
  std::string path = std::string(self, n);
  path = path.substr(0, path.rfind('/') + 1) + "lumen-collective-bench";
  if (::access(path.c_str(), X_OK) != 0) {
    std::fprintf(stderr, "allreduce_gigabytes etc. skipped: %s is not built\n", path.c_str());
    return 0;
  }
  std::fflush(stdout);
  int status = std::system(("'" + path + "'" + (quick ? " --quick" : "")).c_str());
  return status == 0 ? 0 : 1;
}

int RunMultiNode(bool quick, double budget) {
  // A head and three node daemons on loopback, each with its own store and
  // ports, this process attached to the first as the driver.
  const uint64_t object_bytes = 256ull << 20;
  std::vector<runtime::ClusterProcesses> clusters;
  std::string head;
  for (int i = 0; i < 3; ++i) {
    runtime::ClusterSpec spec;
    spec.start_head = head.empty();
    spec.head_address = head;
    spec.resources = {{"CPU", 2}};
    spec.object_store_bytes = 3 * object_bytes;
    auto cluster = runtime::StartCluster(spec);
    if (!cluster.ok()) {
      std::fprintf(stderr, "cannot start the 3-node cluster: %s\n",
                   std::string(cluster.status().message()).c_str());
      return 1;
    }
    head = cluster->head_address;
    clusters.push_back(std::move(*cluster));
  }
  Config config;
  config.address = head;
  // Joining nodes register asynchronously: wait until all three are listed.
  while (true) {
    auto nodes = runtime::QueryNodes(head);
    if (nodes.ok() && nodes->size() == 3) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  Init(config);
  std::vector<std::string> node_ids;
  for (const auto& node : Nodes()) node_ids.push_back(node.id);

  Report("multi_node_tasks_async", Rate(budget, 10000, [] {
           std::vector<ObjectRef<int>> refs;
           refs.reserve(10000);
           for (int i = 0; i < 10000; ++i) {
             refs.push_back(Task(Noop).SetSchedulingStrategy(Spread()).Remote());
           }
           Get(refs);
         }),
         "tasks/s");
  Report("placement_group_create/removal", Rate(budget, 1, [] {
           auto pg = CreatePlacementGroup({.bundles = {{{"CPU", 1}}}});
           pg.Wait(std::chrono::seconds(30));
           RemovePlacementGroup(pg.GetID());
         }),
         "groups/s");

  // Cross-node transfer: an array made on another node, read here (the read
  // pulls it into this node's store, then maps it).
  std::string other;
  for (const auto& id : node_ids)
    if (id != GetNodeId()) other = id;
  int rounds = quick ? 2 : 6;
  double seconds = 0, loopback_bytes_per_second = 0;
  for (int i = 0; i < rounds; ++i) {
    // The limit, measured in turn with the transfers (this machine is noisy).
    loopback_bytes_per_second +=
        objectstore::MeasureLoopbackTcpBytesPerSecond(object_bytes) / rounds;
    auto ref = Task(MakeBytes).SetSchedulingStrategy(NodeAffinity(other)).Remote(object_bytes);
    Wait(std::vector{ref}, 1);
    auto t0 = Clock::now();
    auto view = GetArray(ref);
    seconds += Seconds(t0);
    if (view.size() != object_bytes || view[object_bytes - 1] != 1) {
      std::fprintf(stderr, "cross-node object arrived damaged\n");
      return 1;
    }
  }
  Report("cross_node_object_gigabytes", rounds * static_cast<double>(object_bytes) / seconds / 1e9,
         "GB/s");
  Report("loopback_tcp_gigabytes", loopback_bytes_per_second / 1e9, "GB/s");
  Shutdown();
  for (auto it = clusters.rbegin(); it != clusters.rend(); ++it) runtime::StopCluster(*it);
  return 0;
}

}  // namespace lumen::bench
