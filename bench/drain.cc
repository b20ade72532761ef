// Drain benchmark (issue 17): submits N no-op tasks at once on an embedded
// cluster, then Gets them all, and prints the drain time, the rate and the
// driver's peak RSS, one row per N.
//
//   build-wait/bench/drain [N ...]        (default: 10000 20000 40000 100000)
//
// The drain time counts from the first submission to the return of
// `lumen::Get(refs)`; the submission time alone is printed too. max_stall_ms
// is the longest any driver io-loop handler ran during that N (only handlers
// over LUMEN_SLOW_HANDLER_WARNING_MS are seen: 0 means none was), with its name.
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "lumen/common/post.h"

#include "lumen/lumen.h"

namespace {
int Noop() { return 0; }
}  // namespace

LUMEN_REMOTE(Noop);

namespace {

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

// The longest slow handler of the driver's io loop since the last Take.
struct StallWatch {
  absl::Mutex mu;
  std::chrono::steady_clock::duration longest ABSL_GUARDED_BY(mu){};
  std::string name ABSL_GUARDED_BY(mu);
  std::pair<double, std::string> Take() {
    absl::MutexLock lock(&mu);
    std::pair<double, std::string> out{
        std::chrono::duration<double, std::milli>(longest).count(), name.empty() ? "-" : name};
    longest = {};
    name.clear();
    return out;
  }
};

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
  static StallWatch stalls;
  lumen::TEST_SetSlowHandlerObserver([](const char* name, std::chrono::steady_clock::duration took) {
    absl::MutexLock lock(&stalls.mu);
    if (took > stalls.longest) {
      stalls.longest = took;
      stalls.name = name;
    }
  });
  stalls.Take();  // not the warm-up's
  std::printf("%10s %10s %10s %12s %14s %13s  %s\n", "N", "submit_s", "drain_s", "tasks/s",
              "peak_rss_MiB", "max_stall_ms", "in_handler");
  std::fflush(stdout);
  for (long n : sizes) {
    auto start = std::chrono::steady_clock::now();
    std::vector<lumen::ObjectRef<int>> refs;
    refs.reserve(n);
    for (long i = 0; i < n; ++i) refs.push_back(lumen::Task(Noop).Remote());
    double submit = Seconds(start);
    auto values = lumen::Get(refs);
    double drain = Seconds(start);
    auto [stall_ms, stall_name] = stalls.Take();
    std::printf("%10ld %10.3f %10.3f %12.0f %14.1f %13.0f  %s\n", n, submit, drain, n / drain,
                PeakRssKiB() / 1024.0, stall_ms, stall_name.c_str());
    std::fflush(stdout);
  }
  lumen::Shutdown();
  return 0;
}
