#include "bench/task_events_overhead.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "bench/check.h"
#include "bench/process_stats.h"
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

// User plus system CPU seconds of this process and of every descendant alive
// now (the embedded cluster's daemons and their workers).
double TreeCpuSeconds() {
  double total = 0;
  std::vector<pid_t> stack{::getpid()};
  while (!stack.empty()) {
    pid_t pid = stack.back();
    stack.pop_back();
    total += CpuSeconds(pid);
    for (pid_t child : ChildrenOf(pid)) stack.push_back(child);
  }
  return total;
}

// The mean of `on` over the mean of `off`; 0 when either is missing.
double Ratio(const std::vector<double>& on, const std::vector<double>& off) {
  if (on.empty() || off.empty()) return 0;
  double a = 0, b = 0;
  for (double x : on) a += x;
  for (double x : off) b += x;
  return (a / static_cast<double>(on.size())) / (b / static_cast<double>(off.size()));
}

}  // namespace

void RunTaskEventsOverhead(Reporter& out, bool quick) {
  const char* old = std::getenv("LUMEN_TASK_EVENTS");
  std::string saved = old ? old : "";
  const int batch = quick ? 100 : 1000;
  // metric -> events on? -> per round: rate (units/s) and CPU (microseconds
  // per unit, every process of the cluster together: what the machine pays,
  // which a loaded machine's rate hides).
  std::map<std::string, std::map<bool, std::vector<double>>> rates, cpu;
  // Times `metric` with `call` (one batch) and its CPU cost per unit.
  auto measure = [&](const std::string& metric, bool events, const std::string& unit,
                     const std::string& cpu_unit, const std::function<void()>& call) {
    std::string suffix = events ? "_events_on" : "_events_off";
    long calls = 0;
    double cpu_before = TreeCpuSeconds();
    auto start = std::chrono::steady_clock::now();
    bool measured = out.Rate(metric + suffix, unit, batch, [&] {
      call();
      ++calls;
    });
    double cpu_seconds = TreeCpuSeconds() - cpu_before;
    double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (!measured || calls == 0) return;
    double us_per_unit = cpu_seconds * 1e6 / static_cast<double>(calls * batch);
    out.Value(metric + "_cpu" + suffix, cpu_unit, [&] { return us_per_unit; });
    // The rate over the warm-up and every trial: each round's one number.
    rates[metric][events].push_back(static_cast<double>(calls * batch) / wall);
    cpu[metric][events].push_back(us_per_unit);
  };
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
      measure("single_client_tasks_async", events, "tasks/s", "us/task", [&] { TaskBatch(batch); });
      ActorHandle<Server> actor;
      if (out.Step("1_1_actor_calls_async" + suffix, [&] {
            actor = Actor(Server::Create).Remote();
            ActorBatch(actor, 1);
          })) {
        measure("1_1_actor_calls_async", events, "calls/s", "us/call", [&] { ActorBatch(actor, batch); });
      }
      actor = ActorHandle<Server>();
      Shutdown();
    }
  }
  for (const auto& [metric, by_setting] : cpu) {
    auto of = [](const std::map<bool, std::vector<double>>& m, bool on) {
      auto it = m.find(on);
      return it == m.end() ? std::vector<double>{} : it->second;
    };
    char line[320];
    std::snprintf(line, sizeof(line),
                  "%s, events on / off: rate %.3f, CPU per call %.3f (all processes; means of %zu rounds)",
                  metric.c_str(), Ratio(of(rates[metric], true), of(rates[metric], false)),
                  Ratio(of(by_setting, true), of(by_setting, false)), of(by_setting, true).size());
    out.Note(line);
  }
  if (old) {
    ::setenv("LUMEN_TASK_EVENTS", saved.c_str(), 1);
  } else {
    ::unsetenv("LUMEN_TASK_EVENTS");
  }
  TaskEvents().SetEnabled(saved != "0");
}

}  // namespace lumen::bench
