#include "bench/actor_metrics.h"

#include <algorithm>
#include <string>
#include <thread>
#include <vector>

#include "bench/check.h"
#include "bench/remote_calls.h"
#include "bench/timeit.h"
#include "lumen/lumen.h"

namespace lumen::bench {
namespace {

// Ray's n_cpu: half the machine's CPUs (multiprocessing.cpu_count() // 2),
// at least one.
int HalfTheCpus() { return std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / 2); }

// `n` calls of SmallValue on `actor`, then a Get of all; every answer checked.
void CallBatch(ActorHandle<Server>& actor, int n) {
  std::vector<ObjectRef<int>> refs;
  refs.reserve(n);
  for (int i = 0; i < n; ++i) refs.push_back(actor.Task(&Server::SmallValue).Remote());
  int ok = CountEqual(Get(refs), 1);
  Check(ok == n, std::to_string(n - ok) + " of " + std::to_string(n) + " calls returned wrong");
}

// Creates `n` servers and waits until each answers a call (outside timing).
std::vector<ActorHandle<Server>> ReadyServers(int n) {
  std::vector<ActorHandle<Server>> servers;
  std::vector<ObjectRef<int>> pings;
  for (int i = 0; i < n; ++i) {
    servers.push_back(Actor(Server::Create).Remote());
    pings.push_back(servers.back().Task(&Server::SmallValue).Remote());
  }
  Check(CountEqual(Get(pings), 1) == n, "a new server answered wrong");
  return servers;
}

void DriverToOneActor(Reporter& out) {
  {
    auto a = ReadyServers(1)[0];
    out.Rate("1_1_actor_calls_sync", "calls/s", 1, [&] {
      Check(*Get(a.Task(&Server::SmallValue).Remote()) == 1, "a call returned wrong");
    });
  }
  {
    auto a = ReadyServers(1)[0];
    out.Rate("1_1_actor_calls_async", "calls/s", 1000, [&] { CallBatch(a, 1000); });
  }
  ActorHandle<Server> concurrent;
  if (!out.Step("1_1_actor_calls_concurrent", [&] {
        concurrent = Actor(Server::Create).SetMaxConcurrency(16).Remote();
        CallBatch(concurrent, 1);
      })) {
    return;
  }
  out.Rate("1_1_actor_calls_concurrent", "calls/s", 1000, [&] { CallBatch(concurrent, 1000); });
}

void ClientsToServers(Reporter& out, bool quick) {
  const int n_cpu = HalfTheCpus();
  {
    // Ray: one Client actor calling n_cpu servers 5,000 times each.
    const int n = Batch(5000, quick);
    std::vector<ActorHandle<Server>> servers;
    ActorHandle<Client> client;
    if (out.Step("1_n_actor_calls_async", [&] {
          servers = ReadyServers(n_cpu);
          client = Actor(Client::Create).Remote(servers);
          Check(*Get(client.Task(&Client::SmallValueBatch).Remote(1)) == n_cpu,
                "the client's first calls returned wrong");
        })) {
      out.Rate("1_n_actor_calls_async", "calls/s", n * n_cpu, [&] {
        int ok = *Get(client.Task(&Client::SmallValueBatch).Remote(n));
        Check(ok == n * n_cpu, std::to_string(n * n_cpu - ok) + " calls returned wrong");
      });
    }
  }
  {
    // Ray: m = 4 `work` tasks, each making 5,000 calls spread over the same
    // n_cpu servers.
    const int m = 4, n = Batch(5000, quick);
    std::vector<ActorHandle<Server>> servers;
    if (out.Step("n_n_actor_calls_async", [&] { servers = ReadyServers(n_cpu); })) {
      out.Rate("n_n_actor_calls_async", "calls/s", m * n, [&] {
        std::vector<ObjectRef<int>> work;
        for (int i = 0; i < m; ++i) work.push_back(Task(CallServers).Remote(servers, n));
        int ok = 0;
        for (const auto& done : Get(work)) ok += *done;
        Check(ok == m * n, std::to_string(m * n - ok) + " calls returned wrong");
      });
    }
  }
  {
    // Ray: n_cpu Client actors, each with its own server, each making 1,000
    // calls whose argument is an object it put into the store.
    const int n = Batch(1000, quick);
    std::vector<ActorHandle<Client>> clients;
    if (out.Step("n_n_actor_calls_with_arg_async", [&] {
          for (auto& server : ReadyServers(n_cpu)) {
            clients.push_back(Actor(Client::Create).Remote(std::vector{server}));
          }
          for (auto& c : clients) {
            Check(*Get(c.Task(&Client::SmallValueBatchArg).Remote(1)) == 1,
                  "a client's first call returned wrong");
          }
        })) {
      out.Rate("n_n_actor_calls_with_arg_async", "calls/s", n * n_cpu, [&] {
        std::vector<ObjectRef<int>> batches;
        for (auto& c : clients) batches.push_back(c.Task(&Client::SmallValueBatchArg).Remote(n));
        int ok = 0;
        for (const auto& done : Get(batches)) ok += *done;
        Check(ok == n * n_cpu, std::to_string(n * n_cpu - ok) + " calls returned wrong");
      });
    }
  }
}

}  // namespace

void RunActorMetrics(Reporter& out, bool quick) {
  DriverToOneActor(out);
  ClientsToServers(out, quick);
  out.Note(
      "1_1_async_actor_calls_sync, 1_1_async_actor_calls_async, "
      "1_1_async_actor_calls_with_args_async, 1_n_async_actor_calls_async, "
      "n_n_async_actor_calls_async: not measured, Lumen actors cannot run coroutines yet");
  // Not a Ray microbenchmark metric: actors started, each answering one call.
  const int batch = quick ? 4 : 20;
  out.Rate("actors_created_per_second", "actors/s", batch, [&] { ReadyServers(batch); });
}

}  // namespace lumen::bench
