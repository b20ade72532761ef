// Ray's many_nodes on one machine (issue 17): 100 node daemons (1 CPU each,
// 16 MiB stores, loopback) joined to one head, a STRICT_SPREAD placement group
// of 100 bundles, 10,000 tasks over its bundles; every node must run some.
// It runs bench/'s RunManyNodes, the `nodes` part of `lumen microbenchmark
// --scale`, and prints what the head costs per node.
//
// Optional: exits 77 (SKIPPED in CTest's count) with a message when this
// machine lacks the open files, process ids or memory for 100 daemons and
// their workers. Labelled `scale`; run it alone with
//
//   ctest --test-dir build -L scale --output-on-failure
//
// Its own main: daemons and workers re-execute this binary (LUMEN_ROLE), and
// lumen::Init hands them over first.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <string>

#include "bench/process_stats.h"
#include "bench/scale_experiments.h"
#include "lumen/lumen.h"

namespace {

constexpr int kNodes = 100;
constexpr int kTasks = 10000;

// Why this machine cannot run it, or "".
std::string MissingResources() {
  // Per node: the daemon's sockets and store, its worker, the head's and the
  // driver's connections to them.
  const long files = 200L + 20L * kNodes;
  if (lumen::bench::OpenFileLimit() < files) {
    return "the open-file limit is " + std::to_string(lumen::bench::OpenFileLimit()) +
           ", 100 nodes need about " + std::to_string(files) + " (ulimit -n)";
  }
  const long memory_kib = 4L << 20;  // ~10 MiB per daemon, ~25 MiB per worker, with room
  if (lumen::bench::AvailableMemoryKiB() < memory_kib) {
    return "only " + std::to_string(lumen::bench::AvailableMemoryKiB() / 1024) +
           " MiB of memory is available, 100 nodes need about 4096 MiB";
  }
  if (lumen::bench::PidLimit() < 4000) {
    return "the process-id limit is " + std::to_string(lumen::bench::PidLimit());
  }
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  if (const char* role = std::getenv("LUMEN_ROLE"); role && *role) lumen::Init(argc, argv);
  if (std::string why = MissingResources(); !why.empty()) {
    std::printf("SKIPPED: %s\n", why.c_str());
    return 77;
  }
  // This run's own TMPDIR: session directories are found and removed here.
  const char* tmp = std::getenv("TMPDIR");
  std::string dir = std::string(tmp && *tmp ? tmp : "/tmp") + "/lumen-t-XXXXXX";
  if (::mkdtemp(dir.data()) == nullptr) return 1;
  ::setenv("TMPDIR", dir.c_str(), 1);
  int status = 0;
  try {
    auto r = lumen::bench::RunManyNodes(kNodes, kTasks, std::chrono::seconds(120));
    std::printf(
        "%d nodes registered in %.1f s; STRICT_SPREAD group created in %.2f s; %d tasks in "
        "%.2f s on %d nodes; head: %.2f CPU s, %.4f CPU s per s idle, RSS %ld KiB (%.1f KiB "
        "per node)\n",
        r.nodes, r.start_seconds, r.group_seconds, kTasks, r.tasks_seconds, r.distinct_nodes,
        r.head_cpu_seconds, r.head_idle_cpu_per_second, r.head_rss_kib,
        static_cast<double>(r.head_rss_kib) / r.nodes);
    if (r.distinct_nodes != kNodes) status = 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "FAILED: %s\n", e.what());
    status = 1;
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return status;
}
