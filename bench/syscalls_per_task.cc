// A fixed workload for counting system calls per task (issue 13's throughput
// work): on an embedded cluster, N no-op tasks submitted at once and then got,
// then M calls of one actor submitted at once and then got, after a warm-up
// (workers started, leases granted, the actor created). Run under strace with
// different N (or M) and subtract: what remains is the cost of the extra tasks
// (or calls) without start-up and shutdown (doc/benchmark.md, "System calls
// per task"; scripts/syscalls-per-task does the runs).
//
//   syscalls_per_task [N [M]]        (default 10000 10000)
#include <cstdio>
#include <cstdlib>
#include <vector>

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
  lumen::Init(argc, argv);
  long n = argc > 1 ? std::atol(argv[1]) : 10000;
  long m = argc > 2 ? std::atol(argv[2]) : 10000;
  auto counter = lumen::Actor(Counter::Create).Remote();
  {
    std::vector<lumen::ObjectRef<int>> refs;
    for (int i = 0; i < 200; ++i) refs.push_back(lumen::Task(Noop).Remote());
    for (int i = 0; i < 200; ++i) refs.push_back(counter.Task(&Counter::Add).Remote());
    lumen::Get(refs);
  }
  std::vector<lumen::ObjectRef<int>> tasks;
  tasks.reserve(n);
  for (long i = 0; i < n; ++i) tasks.push_back(lumen::Task(Noop).Remote());
  long zeros = 0;
  for (const auto& v : lumen::Get(tasks)) zeros += *v == 0;
  std::vector<lumen::ObjectRef<int>> calls;
  calls.reserve(m);
  for (long i = 0; i < m; ++i) calls.push_back(counter.Task(&Counter::Add).Remote());
  auto values = lumen::Get(calls);
  bool ok = zeros == n && (m == 0 || *values.back() == static_cast<int>(200 + m));
  std::printf("%ld tasks, %ld actor calls: %s\n", n, m, ok ? "ok" : "WRONG RESULTS");
  lumen::Shutdown();
  return ok ? 0 : 1;
}
