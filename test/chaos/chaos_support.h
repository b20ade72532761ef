// Shared support for the fault-injection ("chaos") tests of issue 14, usable by
// any integration test: a seeded random source that reports its seed, a
// teardown check that a cluster left nothing behind, and reads of what the
// cluster is doing (busy workers, free CPUs, store bytes).
//
//   lumen::test::chaos::Seed seed;                    // LUMEN_TEST_SEED or fresh
//   INFO("seed " << seed.value());
//   lumen::test::chaos::LeakCheck leaks;              // snapshot before the cluster
//   std::string session;
//   {
//     lumen::test::ScopedCluster cluster;
//     session = cluster.session_dir();
//     auto busy = lumen::test::chaos::BusyWorkerPids();  // pids running tasks now
//   }                                                  // Shutdown
//   CHECK(leaks.Leaks(session) == "");               // "" when clean, else what leaked
//
// Waiting on conditions: lumen::test::WaitUntil (test/core/test_support.h).
// Not thread-safe: use from the test's thread.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace lumen::test::chaos {

// The seed of a randomised test: $LUMEN_TEST_SEED when set (to replay a
// failure), else a fresh one. Print it with INFO so a failure shows it.
class Seed {
 public:
  Seed();
  uint64_t value() const { return value_; }
  // A generator seeded with it.
  std::mt19937_64 Engine() const { return std::mt19937_64(value_); }

 private:
  uint64_t value_;
};

// What a cluster may leave behind, snapshotted at construction (before the
// cluster starts) and compared after Shutdown by Leaks():
//  - new /dev/shm entries whose name contains "lumen";
//  - more open fds in this process pointing at a store segment (memfd
//    "lumen-store" or a file under /dev/shm) than before;
//  - mappings of a store segment left in this process;
//  - children of this process (zombies included) that were not there before;
//  - live processes whose command line or environment names the session
//    directory (workers or daemons orphaned by the cluster).
class LeakCheck {
 public:
  LeakCheck();
  // Waits up to `timeout` for the leftovers to go (processes exit and are
  // reaped asynchronously after Shutdown); returns "" when nothing leaked, else
  // one line per leak. `session_dir` may be empty (no process check by name).
  std::string Leaks(const std::string& session_dir,
                    std::chrono::milliseconds timeout = std::chrono::seconds(10)) const;

 private:
  std::set<std::string> shm_entries_;
  size_t store_fds_ = 0;
  size_t store_mappings_ = 0;
  std::set<pid_t> children_;
};

// Open fds of this process whose link names a store segment.
size_t StoreFdsOfThisProcess();
// Lines of /proc/self/maps that map a store segment.
size_t StoreMappingsOfThisProcess();
// Children of this process, zombies included.
std::set<pid_t> ChildrenWithZombies();

// What the cluster of this driver (lumen::Init done) reports now, summed over
// its alive nodes, asked of each node daemon directly (fresher than the
// head's periodic view).
struct ClusterUsage {
  double total_cpus = 0;
  double free_cpus = 0;
  uint64_t store_used = 0;   // bytes in the nodes' stores
  uint32_t workers = 0;      // worker processes (the pool)
  uint32_t idle_workers = 0;
  uint32_t active_leases = 0;
};
// Throws lumen::Error when the head or a node cannot be asked.
ClusterUsage ReadClusterUsage();

// The pids of the workers running (or holding pipelined) tasks of this driver
// now, as `lumen list tasks` shows them (RUNNING rows, WORKER_PID column), over
// every alive node. Empty when none runs or a node cannot be asked.
std::vector<pid_t> BusyWorkerPids();

// Whether process `pid` has ended (gone, or a zombie not reaped yet).
bool ProcessGone(pid_t pid);

// A file-backed counter for counting attempts from inside tasks: each call
// appends one line to `path` (O_APPEND, one write: atomic between processes).
void AppendLine(const std::string& path, const std::string& line);
// The lines of `path` (none when it does not exist).
std::vector<std::string> ReadLines(const std::string& path);

// A scratch directory under $TMPDIR, removed with its contents at scope exit.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& prefix);
  ~ScratchDir();
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace lumen::test::chaos
