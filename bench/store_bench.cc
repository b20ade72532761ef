// The object store's metrics of `lumen microbenchmark` on their own, for
// working on the store (a full microbenchmark takes minutes before it gets to
// the spill metrics): the same code, the same store size and the same output
// lines.
//
//   store_bench [--quick] [put] [spill] [small=N]...
//
// put: single_client_put_gigabytes and memcpy_gigabytes (an embedded cluster
// with the microbenchmark's store); spill: spill_/restore_/disk_*_gigabytes (a
// store in this process); small=N: N small objects put through the store, the
// time and the node daemon's bytes per object. Without a choice: put and spill.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench/object_metrics.h"
#include "bench/reporter.h"
#include "bench/small_objects.h"
#include "bench/spill_metrics.h"
#include "lumen/lumen.h"

int main(int argc, char** argv) {
  using namespace lumen::bench;
  if (const char* role = std::getenv("LUMEN_ROLE"); role && *role) {
    lumen::Init(argc, argv);  // a worker or daemon re-executing this program
    return 0;
  }
  bool quick = false;
  std::vector<std::string> chosen;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--quick") {
      quick = true;
    } else if (arg == "put" || arg == "spill" || arg.rfind("small=", 0) == 0) {
      chosen.push_back(arg);
    } else {
      std::fprintf(stderr, "usage: store_bench [--quick] [put] [spill] [small=N]...\n");
      return 2;
    }
  }
  if (chosen.empty()) chosen = {"put", "spill"};
  Reporter out(PlanFor(quick));
  bool cluster = false;
  for (const std::string& what : chosen) {
    if (what == "spill") {
      RunSpillMetrics(out, quick);
      continue;
    }
    if (!cluster) {
      lumen::Config config;
      config.object_store_memory = 4 * LargePutBytes(quick);  // as the microbenchmark's
      lumen::Init(config);
      cluster = true;
    }
    if (what == "put") {
      RunLargePutMetrics(out, quick);
    } else {
      const long n = std::atol(what.c_str() + 6);
      out.Step(what, [&] {
        SmallObjectCost cost = MeasureSmallObjects(EmbeddedNodeDaemon(), n);
        char line[200];
        std::snprintf(line, sizeof(line),
                      "%ld small objects: %.2f s (%.1f us each), node daemon RssAnon %ld -> %ld "
                      "KiB, %.1f B per object",
                      n, cost.seconds, cost.seconds * 1e6 / static_cast<double>(n),
                      cost.daemon_kib_before, cost.daemon_kib_after, cost.bytes_per_object);
        out.Note(line);
      });
    }
  }
  if (cluster) lumen::Shutdown();
  return out.failures() == 0 ? 0 : 1;
}
