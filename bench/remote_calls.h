// The remote functions and actors the microbenchmark calls, after Ray's
// ray_perf.py: `small_value` (a task returning a small value), `Actor` (here
// Server: small_value, small_value_arg, small_value_batch) and `Client` (an
// actor that calls a list of servers). Registered with LUMEN_REMOTE in
// remote_calls.cc, so every process of the `lumen` binary can run them.
//
//   auto server = Actor(Server::Create).Remote();
//   auto client = Actor(Client::Create).Remote(std::vector{server});
//   int calls = *Get(client.Task(&Client::SmallValueBatch).Remote(1000));
//
// Each returns what it did, so the driver checks every batch (Check throws
// inside the worker, and the driver's Get rethrows it as a TaskError).
#pragma once

#include <vector>

#include "lumen/lumen.h"

namespace lumen::bench {

// Ray's small_value: returns 1 (Ray returns b"ok").
int SmallValue();

// Ray's small_value_batch task: submits `n` SmallValue tasks and gets them;
// returns n once all returned 1.
int SmallValueBatch(int n);

// Ray's `Actor`. Calls from one caller run one at a time unless the actor was
// created with a higher max_concurrency; it keeps no state, so calls may run
// concurrently.
class Server {
 public:
  static Server* Create() { return new Server(); }
  int SmallValue() { return 1; }
  // Returns its argument, so that the caller sees the argument arrived.
  int SmallValueArg(int x) { return x; }
  // Submits `n` SmallValue tasks from this actor and gets them; returns n.
  int SmallValueBatch(int n) { return bench::SmallValueBatch(n); }
};

// Ray's `Client`: calls every server `n` times, then gets all the answers.
// One caller at a time (max_concurrency 1).
class Client {
 public:
  static Client* Create(std::vector<ActorHandle<Server>> servers) {
    return new Client(std::move(servers));
  }
  // n calls of SmallValue per server; returns the calls that returned 1.
  int SmallValueBatch(int n);
  // n calls of SmallValueArg per server, each with the same argument: a
  // small object this call puts into the node's store. Returns the calls that
  // returned the argument's value.
  int SmallValueBatchArg(int n);

 private:
  explicit Client(std::vector<ActorHandle<Server>> servers) : servers_(std::move(servers)) {}
  std::vector<ActorHandle<Server>> servers_;
};

// Ray's `work` task of n:n actor calls: `n` calls of SmallValue spread over
// `servers` (call i to server i % size); returns the calls that returned 1.
int CallServers(std::vector<ActorHandle<Server>> servers, int n);

// The number of `answers` equal to `expected`.
int CountEqual(const std::vector<std::shared_ptr<int>>& answers, int expected);

}  // namespace lumen::bench
