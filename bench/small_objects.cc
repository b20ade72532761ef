#include "bench/small_objects.h"

#include <unistd.h>

#include <chrono>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "bench/check.h"
#include "bench/process_stats.h"
#include "bench/store_put.h"
#include "lumen/lumen.h"

namespace lumen::bench {

SmallObjectCost MeasureSmallObjects(pid_t daemon, long n) {
  Check(daemon > 0, "no node daemon to measure");
  SmallObjectCost cost;
  cost.objects = n;
  std::vector<ObjectRef<int>> refs;
  refs.reserve(static_cast<size_t>(n));
  // One put first: the daemon's first store request warms its buffers.
  refs.push_back(PutIntoStore(0));
  cost.daemon_kib_before = RssAnonKiB(daemon);
  auto start = std::chrono::steady_clock::now();
  for (long i = 0; i < n; ++i) refs.push_back(PutIntoStore(static_cast<int>(i)));
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
    std::ifstream in("/proc/" + std::to_string(child) + "/environ", std::ios::binary);
    std::string env((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (env.find(std::string("LUMEN_ROLE=node\0", 16)) != std::string::npos) return child;
  }
  return 0;
}

}  // namespace lumen::bench
