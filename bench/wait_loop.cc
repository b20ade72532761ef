// The driver's own work in `single_client_wait_1k_refs` and
// `single_client_tasks_and_get_batch`, without the tasks' pipeline: N refs
// whose tasks have all finished, drained by `Wait(std::move(refs), 1)` until
// none is left, as Ray's wait_multiple_refs does (N calls, each on what the
// last left), and got with one `Get(refs)`. Prints the calling thread's CPU
// time per drain and per Wait call, and per Get and per ref got (best of
// `rounds`): steadier than the metrics' rates on a shared machine, and what a
// change to the fast paths of Wait and Get (every ref already ready: no
// registration, no blocking) moves.
//
//   build/bench/wait_loop [refs] [rounds]        # default 1000 50
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "lumen/lumen.h"

namespace {
int Noop() { return 0; }

double ThreadSeconds() {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}
}  // namespace

LUMEN_REMOTE(Noop);

int main(int argc, char** argv) {
  lumen::Config config;
  config.object_store_memory = 256ull << 20;
  lumen::Init(config, argc, argv);
  const long n = argc > 1 ? std::max(1L, std::atol(argv[1])) : 1000;
  const int rounds = argc > 2 ? std::max(1, std::atoi(argv[2])) : 50;
  std::vector<lumen::ObjectRef<int>> finished;
  finished.reserve(n);
  for (long i = 0; i < n; ++i) finished.push_back(lumen::Task(Noop).Remote());
  lumen::Get(finished);  // all ready from here on
  double best = 1e9;
  long calls = 0;
  for (int r = 0; r < rounds; ++r) {
    std::vector<lumen::ObjectRef<int>> refs = finished;  // copied outside the timing
    const double t0 = ThreadSeconds();
    calls = 0;
    while (!refs.empty()) {
      auto result = lumen::Wait(std::move(refs), 1);
      ++calls;
      if (result.ready.size() != 1) {
        std::fprintf(stderr, "Wait(refs, 1) returned %zu ready refs\n", result.ready.size());
        return 1;
      }
      refs = std::move(result.unready);
    }
    best = std::min(best, ThreadSeconds() - t0);
  }
  std::printf("%.1f us per drain of %ld refs, %.0f ns per Wait (best of %d rounds)\n", best * 1e6,
              n, best * 1e9 / static_cast<double>(calls), rounds);
  best = 1e9;
  long sum = 0;
  for (int r = 0; r < rounds; ++r) {
    const double t0 = ThreadSeconds();
    for (const auto& value : lumen::Get(finished)) sum += *value;
    best = std::min(best, ThreadSeconds() - t0);
  }
  if (sum != 0) {
    std::fprintf(stderr, "Get returned values other than 0\n");
    return 1;
  }
  std::printf("%.1f us per Get of %ld refs, %.0f ns per ref (best of %d rounds)\n", best * 1e6, n,
              best * 1e9 / static_cast<double>(n), rounds);
  lumen::Shutdown();
  return 0;
}
