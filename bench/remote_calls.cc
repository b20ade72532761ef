#include "bench/remote_calls.h"

#include "bench/check.h"
#include "bench/store_put.h"

namespace lumen::bench {

int SmallValue() { return 1; }

int CountEqual(const std::vector<std::shared_ptr<int>>& answers, int expected) {
  int equal = 0;
  for (const auto& a : answers) equal += (a != nullptr && *a == expected) ? 1 : 0;
  return equal;
}

int SmallValueBatch(int n) {
  std::vector<ObjectRef<int>> refs;
  refs.reserve(n);
  for (int i = 0; i < n; ++i) refs.push_back(Task(SmallValue).Remote());
  return CountEqual(Get(refs), 1);
}

int Client::SmallValueBatch(int n) {
  std::vector<ObjectRef<int>> refs;
  refs.reserve(n * servers_.size());
  for (auto& server : servers_) {
    for (int i = 0; i < n; ++i) refs.push_back(server.Task(&Server::SmallValue).Remote());
  }
  return CountEqual(Get(refs), 1);
}

int Client::SmallValueBatchArg(int n) {
  auto x = PutIntoStore(0);
  std::vector<ObjectRef<int>> refs;
  refs.reserve(n * servers_.size());
  for (auto& server : servers_) {
    for (int i = 0; i < n; ++i) refs.push_back(server.Task(&Server::SmallValueArg).Remote(x));
  }
  return CountEqual(Get(refs), 0);
}

int CallServers(std::vector<ActorHandle<Server>> servers, int n) {
  Check(!servers.empty(), "no servers to call");
  std::vector<ObjectRef<int>> refs;
  refs.reserve(n);
  for (int i = 0; i < n; ++i) {
    refs.push_back(servers[i % servers.size()].Task(&Server::SmallValue).Remote());
  }
  return CountEqual(Get(refs), 1);
}

}  // namespace lumen::bench

LUMEN_REMOTE(lumen::bench::SmallValue, lumen::bench::SmallValueBatch, lumen::bench::CallServers,
             lumen::bench::Server::Create, &lumen::bench::Server::SmallValue,
             &lumen::bench::Server::SmallValueArg, &lumen::bench::Server::SmallValueBatch,
             lumen::bench::Client::Create, &lumen::bench::Client::SmallValueBatch,
             &lumen::bench::Client::SmallValueBatchArg);
