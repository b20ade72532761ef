// Drain benchmark (issue 17): submits N no-op tasks at once on an embedded
// cluster, then Gets them all, and prints the drain time, the rate and the
// driver's peak RSS, one row per N.
//
//   build-wait/bench/drain [N ...]        (default: 10000 20000 40000 100000)
//
// The drain time counts from the first submission to the return of
// `lumen::Get(refs)`; the submission time alone is printed too.
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "lumen/lumen.h"

namespace {
int Noop() { return 0; }
}  // namespace

LUMEN_REMOTE(Noop);

namespace {

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

long PeakRssKiB() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss;  // KiB on Linux
}

}  // namespace

int main(int argc, char** argv) {
  lumen::Init(argc, argv);
  std::vector<long> sizes;
  for (int i = 1; i < argc; ++i) sizes.push_back(std::atol(argv[i]));
  if (sizes.empty()) sizes = {10000, 20000, 40000, 100000};
  {
    // Warm up: workers started, leases granted.
    std::vector<lumen::ObjectRef<int>> refs;
    for (int i = 0; i < 1000; ++i) refs.push_back(lumen::Task(Noop).Remote());
    lumen::Get(refs);
  }
  std::printf("%10s %10s %10s %12s %14s\n", "N", "submit_s", "drain_s", "tasks/s", "peak_rss_MiB");
  std::fflush(stdout);
  for (long n : sizes) {
    auto start = std::chrono::steady_clock::now();
    std::vector<lumen::ObjectRef<int>> refs;
    refs.reserve(n);
    for (long i = 0; i < n; ++i) refs.push_back(lumen::Task(Noop).Remote());
    double submit = Seconds(start);
    auto values = lumen::Get(refs);
    double drain = Seconds(start);
    std::printf("%10ld %10.3f %10.3f %12.0f %14.1f\n", n, submit, drain, n / drain,
                PeakRssKiB() / 1024.0);
    std::fflush(stdout);
  }
  lumen::Shutdown();
  return 0;
}
