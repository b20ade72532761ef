#include "bench/task_events_overhead.h"

#include <cstdlib>
#include <string>
#include <vector>

#include "bench/check.h"
#include "bench/remote_calls.h"
#include "lumen/common/task_events.h"
#include "lumen/lumen.h"

namespace lumen::bench {
namespace {

void TaskBatch(int n) {
  int ok = SmallValueBatch(n);
  Check(ok == n, std::to_string(n - ok) + " of " + std::to_string(n) + " tasks returned wrong");
}

void ActorBatch(ActorHandle<Server>& actor, int n) {
  std::vector<ObjectRef<int>> refs;
  refs.reserve(n);
  for (int i = 0; i < n; ++i) refs.push_back(actor.Task(&Server::SmallValue).Remote());
  int ok = CountEqual(Get(refs), 1);
  Check(ok == n, std::to_string(n - ok) + " of " + std::to_string(n) + " calls returned wrong");
}

}  // namespace

void RunTaskEventsOverhead(Reporter& out, bool quick) {
  const char* old = std::getenv("LUMEN_TASK_EVENTS");
  std::string saved = old ? old : "";
  const int batch = quick ? 100 : 1000;
  for (int round = 0; round < 2; ++round) {
    for (bool events : {true, false}) {
      std::string suffix = events ? "_events_on" : "_events_off";
      // Daemons and workers read it at start; the driver's recorder is switched here.
      ::setenv("LUMEN_TASK_EVENTS", events ? "1" : "0", 1);
      TaskEvents().SetEnabled(events);
      if (!out.Step("task_events" + suffix, [] {
            Config config;
            config.num_cpus = 4;
            config.object_store_memory = 256ull << 20;
            Init(config);
          })) {
        continue;
      }
      out.Rate("single_client_tasks_async" + suffix, "tasks/s", batch, [&] { TaskBatch(batch); });
      ActorHandle<Server> actor;
      if (out.Step("1_1_actor_calls_async" + suffix, [&] {
            actor = Actor(Server::Create).Remote();
            ActorBatch(actor, 1);
          })) {
        out.Rate("1_1_actor_calls_async" + suffix, "calls/s", batch,
                 [&] { ActorBatch(actor, batch); });
      }
      actor = ActorHandle<Server>();
      Shutdown();
    }
  }
  if (old) {
    ::setenv("LUMEN_TASK_EVENTS", saved.c_str(), 1);
  } else {
    ::unsetenv("LUMEN_TASK_EVENTS");
  }
  TaskEvents().SetEnabled(saved != "0");
}

}  // namespace lumen::bench
