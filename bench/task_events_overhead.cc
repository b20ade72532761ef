#include "bench/task_events_overhead.h"

#include <unistd.h>

#include <algorithm>
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

// User plus system CPU seconds of this process (the driver), of its children
// (the embedded cluster's head and node daemon) and of theirs (the workers),
// alive now.
struct TreeCpu {
  double driver = 0, daemons = 0, workers = 0;
  double total() const { return driver + daemons + workers; }
};

TreeCpu TreeCpuSeconds() {
  TreeCpu cpu;
  std::vector<std::pair<pid_t, int>> stack{{::getpid(), 0}};
  while (!stack.empty()) {
    auto [pid, depth] = stack.back();
    stack.pop_back();
    double s = CpuSeconds(pid);
    (depth == 0 ? cpu.driver : depth == 1 ? cpu.daemons : cpu.workers) += s;
    for (pid_t child : ChildrenOf(pid)) stack.emplace_back(child, depth + 1);
  }
  return cpu;
}

// One metric's measurements: round -> events on? -> what that half measured.
struct Half {
  double rate = 0;    // units/s over the warm-up and every trial
  double cpu_us = 0;  // microseconds per unit, every process of the cluster together
};
using Rounds = std::map<int, std::map<bool, Half>>;

// The mean of `field` with events on over its mean with them off, over every
// half measured; 0 when either setting has none. `count` gets the on halves.
double RatioOfMeans(const Rounds& rounds, double Half::*field, size_t* count) {
  double sum[2] = {0, 0};
  size_t n[2] = {0, 0};
  for (const auto& [round, halves] : rounds) {
    for (const auto& [on, half] : halves) {
      sum[on] += half.*field;
      ++n[on];
    }
  }
  *count = n[1];
  if (n[0] == 0 || n[1] == 0) return 0;
  return (sum[1] / static_cast<double>(n[1])) / (sum[0] / static_cast<double>(n[0]));
}

// Each round's on over its off (the two ran back to back, on one state of
// the machine), sorted: "0.871 0.902 0.925 (median 0.902)". Rounds that lost
// either side are left out; empty when none is whole.
std::string PairedRatios(const Rounds& rounds) {
  std::vector<double> ratios;
  for (const auto& [round, halves] : rounds) {
    auto on = halves.find(true), off = halves.find(false);
    if (on != halves.end() && off != halves.end() && off->second.rate > 0) {
      ratios.push_back(on->second.rate / off->second.rate);
    }
  }
  if (ratios.empty()) return "";
  std::sort(ratios.begin(), ratios.end());
  std::string text;
  char number[32];
  for (double r : ratios) {
    std::snprintf(number, sizeof(number), "%s%.3f", text.empty() ? "" : " ", r);
    text += number;
  }
  const size_t n = ratios.size();
  const double median = n % 2 == 1 ? ratios[n / 2] : (ratios[n / 2 - 1] + ratios[n / 2]) / 2;
  std::snprintf(number, sizeof(number), " (median %.3f)", median);
  return text + number;
}

}  // namespace

void RunTaskEventsOverhead(Reporter& out, bool quick) {
  const char* old = std::getenv("LUMEN_TASK_EVENTS");
  std::string saved = old ? old : "";
  const int batch = quick ? 100 : 1000;
  // metric -> its rounds: the rate and the CPU (what the machine pays, which
  // a loaded machine's rate hides) of each half.
  std::map<std::string, Rounds> measured_rounds;
  int round = 0;
  // Times `metric` with `call` (one batch) and its CPU cost per unit.
  auto measure = [&](const std::string& metric, bool events, const std::string& unit,
                     const std::string& cpu_unit, const std::function<void()>& call) {
    std::string suffix = events ? "_events_on" : "_events_off";
    long calls = 0;
    TreeCpu cpu_before = TreeCpuSeconds();
    auto start = std::chrono::steady_clock::now();
    bool measured = out.Rate(metric + suffix, unit, batch, [&] {
      call();
      ++calls;
    });
    TreeCpu cpu_after = TreeCpuSeconds();
    double cpu_seconds = cpu_after.total() - cpu_before.total();
    double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (!measured || calls == 0) return;
    const double units = static_cast<double>(calls * batch);
    double us_per_unit = cpu_seconds * 1e6 / units;
    out.Value(metric + "_cpu" + suffix, cpu_unit, [&] { return us_per_unit; });
    // Where it went: workers include the time they spin waiting for the next
    // task (the executor's idle spin), which grows with any slowdown of the
    // submitter, not only with work.
    char parts[200];
    std::snprintf(parts, sizeof(parts), "%s%s CPU per unit (us): driver %.2f, head+node daemon %.2f, workers %.2f",
                  metric.c_str(), suffix.c_str(), (cpu_after.driver - cpu_before.driver) * 1e6 / units,
                  (cpu_after.daemons - cpu_before.daemons) * 1e6 / units,
                  (cpu_after.workers - cpu_before.workers) * 1e6 / units);
    out.Note(parts);
    // The rate over the warm-up and every trial: each round's one number.
    measured_rounds[metric][round][events] = Half{units / wall, us_per_unit};
  };
  // LUMEN_TASK_EVENTS_ROUNDS: alternations of on and off; unless set 6 (2
  // with --quick): one round's ratio strays by tenths on a shared 2-core
  // machine, a median of two rounds means little.
  int rounds = quick ? 2 : 6;
  if (const char* r = std::getenv("LUMEN_TASK_EVENTS_ROUNDS"); r != nullptr && std::atoi(r) > 0) {
    rounds = std::atoi(r);
  }
  auto start_cluster = [] {
    Config config;
    config.num_cpus = 4;
    config.object_store_memory = 256ull << 20;
    Init(config);
  };
  // One untimed pass first: the process's first cluster pays one-time costs
  // (code and heap faulted in, the worker binary's pages cached) that would
  // otherwise fall on whichever setting runs first.
  out.Step("task_events_warm_up", [&] {
    start_cluster();
    struct ShutdownAtEnd {
      ~ShutdownAtEnd() { Shutdown(); }
    } shutdown_at_end;
    for (int i = 0; i < (quick ? 5 : 100); ++i) TaskBatch(batch);
    ActorHandle<Server> actor = Actor(Server::Create).Remote();
    for (int i = 0; i < (quick ? 5 : 100); ++i) ActorBatch(actor, batch);
  });
  for (round = 0; round < rounds; ++round) {
    // On first in even rounds, off first in odd ones: neither setting always
    // runs on the machine state the other left.
    for (bool events : {round % 2 == 0, round % 2 != 0}) {
      std::string suffix = events ? "_events_on" : "_events_off";
      // Daemons and workers read it at start; the driver's recorder is switched
      // here. LUMEN_TASK_EVENTS_ONLY=driver|cluster: "on" turns events on in
      // that side alone (to tell where their cost lands).
      const char* only_env = std::getenv("LUMEN_TASK_EVENTS_ONLY");
      const std::string only = only_env != nullptr ? only_env : "";
      ::setenv("LUMEN_TASK_EVENTS", events && only != "driver" ? "1" : "0", 1);
      TaskEvents().SetEnabled(events && only != "cluster");
      if (!out.Step("task_events" + suffix, start_cluster)) {
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
  for (const auto& [metric, rounds_of_metric] : measured_rounds) {
    size_t on_rounds = 0;
    const double rate = RatioOfMeans(rounds_of_metric, &Half::rate, &on_rounds);
    const double cpu = RatioOfMeans(rounds_of_metric, &Half::cpu_us, &on_rounds);
    char line[320];
    std::snprintf(line, sizeof(line),
                  "%s, events on / off: rate %.3f, CPU per call %.3f (all processes; means of %zu rounds)",
                  metric.c_str(), rate, cpu, on_rounds);
    out.Note(line);
    // The means hide how far one round's pair strays from the next (several
    // points on a shared 2-core machine): each round's own ratio.
    std::string paired = PairedRatios(rounds_of_metric);
    if (!paired.empty()) out.Note(metric + ", events on / off rate by round: " + paired);
  }
  if (old) {
    ::setenv("LUMEN_TASK_EVENTS", saved.c_str(), 1);
  } else {
    ::unsetenv("LUMEN_TASK_EVENTS");
  }
  TaskEvents().SetEnabled(saved != "0");
}

}  // namespace lumen::bench
