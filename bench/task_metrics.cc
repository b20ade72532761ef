#include "bench/task_metrics.h"

#include <string>
#include <thread>
#include <vector>

#include "bench/check.h"
#include "bench/remote_calls.h"
#include "bench/timeit.h"
#include "lumen/lumen.h"

namespace lumen::bench {
namespace {

void SubmitAndGet(int n) {
  int ok = SmallValueBatch(n);
  Check(ok == n, std::to_string(n - ok) + " of " + std::to_string(n) + " tasks returned wrong");
}

// Ray's wait_multiple_refs: 1,000 tasks, then wait(num_returns=1) on the
// not-yet-ready ones until none is left. Lumen's Wait, as Ray's, returns
// exactly one ready ref per call, so there are always 1,000 calls.
void WaitOneAtATime() {
  constexpr int kRefs = 1000;
  std::vector<ObjectRef<int>> not_ready;
  not_ready.reserve(kRefs);
  for (int i = 0; i < kRefs; ++i) not_ready.push_back(Task(SmallValue).Remote());
  int calls = 0;
  while (!not_ready.empty()) {
    // The refs move into the result and back (Python's list building is
    // only reference-count increments): the Wait itself is what is timed.
    auto result = Wait(std::move(not_ready), 1);
    ++calls;
    // The message only on failure: built on every call it cost the loop
    // three allocations per Wait (~7 % of the driver's CPU, stop 31).
    if (result.ready.size() != 1) {
      Check(false, "Wait(refs, 1) returned " + std::to_string(result.ready.size()) +
                       " ready refs, not 1");
    }
    not_ready = std::move(result.unready);
  }
  Check(calls == kRefs, "waited " + std::to_string(calls) + " times, not 1000");
}

void ClientsSubmittingTasks(Reporter& out, bool quick) {
  // Ray: 4 `Actor`s, each submitting 10,000 small_value tasks and getting them.
  const int clients = 4, n = Batch(10000, quick);
  std::vector<ActorHandle<Server>> actors;
  for (int i = 0; i < clients; ++i) actors.push_back(Actor(Server::Create).Remote());
  out.Rate("multi_client_tasks_async", "tasks/s", clients * n, [&] {
    std::vector<ObjectRef<int>> batches;
    for (auto& a : actors) batches.push_back(a.Task(&Server::SmallValueBatch).Remote(n));
    int ok = 0;
    for (const auto& done : Get(batches)) ok += *done;
    Check(ok == clients * n, std::to_string(clients * n - ok) + " tasks returned wrong");
  });
}

void PlacementGroups(Reporter& out, bool quick, std::chrono::milliseconds wait_timeout) {
  // Ray: 100 groups of one bundle {"custom": 0.001}, each waited for
  // (timeout 30 s), then all removed.
  const int groups = quick ? 10 : 100;
  out.Rate("placement_group_create/removal", "groups/s", groups, [&] {
    std::vector<PlacementGroup> pgs;
    pgs.reserve(groups);
    for (int i = 0; i < groups; ++i) {
      pgs.push_back(CreatePlacementGroup({.bundles = {{{kCustomResource, 0.001}}}}));
    }
    for (auto& pg : pgs) {
      Check(pg.Wait(wait_timeout), "a placement group was not placed within " +
                                       std::to_string(wait_timeout.count()) + " ms");
    }
    for (auto& pg : pgs) RemovePlacementGroup(pg.GetID());
  });
}

}  // namespace

void RunTaskMetrics(Reporter& out, bool quick, std::chrono::milliseconds wait_timeout) {
  out.Rate("single_client_tasks_and_get_batch", "batches/s", 1, [] { SubmitAndGet(1000); });
  out.Rate("single_client_wait_1k_refs", "waits/s", 1, WaitOneAtATime);
  out.Rate("single_client_tasks_sync", "tasks/s", 1,
           [] { Check(*Get(Task(SmallValue).Remote()) == 1, "a task returned wrong"); });
  out.Rate("single_client_tasks_async", "tasks/s", 1000, [] { SubmitAndGet(1000); });
  ClientsSubmittingTasks(out, quick);
  PlacementGroups(out, quick, wait_timeout);
}

}  // namespace lumen::bench
