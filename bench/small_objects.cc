#include "bench/small_objects.h"

#include <unistd.h>

#include <chrono>
#include <exception>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "bench/check.h"
#include "bench/process_stats.h"
#include "bench/store_put.h"
#include "lumen/common/process.h"
#include "lumen/lumen.h"

namespace lumen::bench {

SmallObjectCost MeasureSmallObjects(pid_t daemon, long n, int threads) {
  Check(daemon > 0, "no node daemon to measure");
  Check(threads >= 1, "MeasureSmallObjects needs a thread");
  SmallObjectCost cost;
  cost.objects = n;
  // refs[i] holds the value i - 1 (refs[0] is the warm-up put).
  std::vector<ObjectRef<int>> refs(static_cast<size_t>(n) + 1);
  // One put first: the daemon's first store request warms its buffers.
  refs[0] = PutIntoStore(0);
  cost.daemon_kib_before = RssAnonKiB(daemon);
  auto start = std::chrono::steady_clock::now();
  // Thread t puts values t, t + threads, ...: each put is two round trips to
  // the daemon, so several threads keep several in flight.
  std::vector<std::exception_ptr> errors(static_cast<size_t>(threads));
  std::vector<std::thread> putters;
  for (int t = 0; t < threads; ++t) {
    putters.emplace_back([&, t] {
      try {
        for (long i = t; i < n; i += threads) {
          refs[static_cast<size_t>(i) + 1] = PutIntoStore(static_cast<int>(i));
        }
      } catch (...) {
        errors[static_cast<size_t>(t)] = std::current_exception();
      }
    });
  }
  for (std::thread& putter : putters) putter.join();
  for (const std::exception_ptr& error : errors) {
    if (error) std::rethrow_exception(error);
  }
  cost.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  cost.daemon_kib_after = RssAnonKiB(daemon);
  Check(*Get(refs[static_cast<size_t>(n / 2) + 1]) == n / 2, "a small object reads back wrong");
  cost.bytes_per_object =
      static_cast<double>(cost.daemon_kib_after - cost.daemon_kib_before) * 1024.0 /
      static_cast<double>(n);
  return cost;
}

pid_t EmbeddedNodeDaemon() {
  for (pid_t child : ChildrenOf(::getpid())) {
    std::string env = ReadProcFile("/proc/" + std::to_string(child) + "/environ");
    if (env.find(std::string("LUMEN_ROLE=node\0", 16)) != std::string::npos) return child;
  }
  return 0;
}

}  // namespace lumen::bench
