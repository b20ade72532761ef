// A fixed workload for counting system calls per task (issue 13's throughput
// work): on an embedded cluster, N no-op tasks submitted at once and then got,
// then M calls of one actor submitted at once and then got, after a warm-up
// (workers started, leases granted, the actor created). Run under strace with
// different N (or M) and subtract: what remains is the cost of the extra tasks
// (or calls) without start-up and shutdown (doc/benchmark.md, "System calls
// per task"; scripts/syscalls-per-task does the runs).
//
//   syscalls_per_task [N [M]]        (default 10000 10000)
//
// It also prints the rate of each phase (submission to the last Get, wall
// clock): with the CPU time of the whole process tree (perf stat, as
// bench/ab/cpu_per_task.sh does) that gives the CPU per task of a fixed
// amount of work, steadier than rates on a shared machine; the driver's own CPU
// per task of the task phase (all its threads) is printed too. And the task events
// this driver lost to a full ring before a flush took them (0 unless the
// flusher falls behind: doc/observability.md).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "bench/process_stats.h"
#include "lumen/common/task_events.h"
#include "lumen/lumen.h"

namespace {
int Noop() { return 0; }

struct Counter {
  static Counter* Create() { return new Counter(); }
  int Add() { return ++value; }
  int value = 0;
};
}  // namespace

LUMEN_REMOTE(Noop, Counter::Create, &Counter::Add);

int main(int argc, char** argv) {
  // A small store: the node reserves its whole store on a background thread
  // (seconds of CPU for the default 30 % of RAM), which would land in the
  // difference of two runs of different length. The workload stores nothing.
  lumen::Config config;
  config.object_store_memory = 256ull << 20;
  lumen::Init(config, argc, argv);
  long n = argc > 1 ? std::atol(argv[1]) : 10000;
  long m = argc > 2 ? std::atol(argv[2]) : 10000;
  auto counter = lumen::Actor(Counter::Create).Remote();
  {
    std::vector<lumen::ObjectRef<int>> refs;
    for (int i = 0; i < 200; ++i) refs.push_back(lumen::Task(Noop).Remote());
    for (int i = 0; i < 200; ++i) refs.push_back(counter.Task(&Counter::Add).Remote());
    lumen::Get(refs);
  }
  using Clock = std::chrono::steady_clock;
  auto seconds_since = [](Clock::time_point t) {
    return std::chrono::duration<double>(Clock::now() - t).count();
  };
  const double cpu0 = lumen::bench::CpuSeconds();  // this process, every thread
  auto t0 = Clock::now();
  std::vector<lumen::ObjectRef<int>> tasks;
  tasks.reserve(n);
  for (long i = 0; i < n; ++i) tasks.push_back(lumen::Task(Noop).Remote());
  long zeros = 0;
  for (const auto& v : lumen::Get(tasks)) zeros += *v == 0;
  double task_seconds = seconds_since(t0);
  const double task_driver_cpu = lumen::bench::CpuSeconds() - cpu0;
  auto t1 = Clock::now();
  std::vector<lumen::ObjectRef<int>> calls;
  calls.reserve(m);
  for (long i = 0; i < m; ++i) calls.push_back(counter.Task(&Counter::Add).Remote());
  auto values = lumen::Get(calls);
  double call_seconds = seconds_since(t1);
  bool ok = zeros == n && (m == 0 || *values.back() == static_cast<int>(200 + m));
  std::printf("%ld tasks, %ld actor calls: %s\n", n, m, ok ? "ok" : "WRONG RESULTS");
  std::printf("tasks_per_s %.0f calls_per_s %.0f\n", n / task_seconds,
              m > 0 ? m / call_seconds : 0.0);
  std::printf("driver_cpu_us_per_task %.3f\n", n > 0 ? task_driver_cpu * 1e6 / n : 0.0);
  std::printf("task_events_dropped %llu\n",
              static_cast<unsigned long long>(lumen::TaskEvents().dropped()));
  lumen::Shutdown();
  return ok ? 0 : 1;
}
