// Helpers for the integration tests: a cluster per test case, waiting on
// conditions with a deadline, and looking at what a cluster left behind.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "lumen/lumen.h"

namespace lumen::test {

// Starts an embedded cluster for one test case and shuts it down at scope exit.
class ScopedCluster {
 public:
  explicit ScopedCluster(Config config = DefaultConfig());
  ~ScopedCluster();
  static Config DefaultConfig();  // 2 CPUs, 512 MiB store
  std::string session_dir() const;

 private:
  std::string session_dir_;
};

// A head and one node daemon per spec on loopback, each node its own process
// with its own store segment, ports and session directory, as `lumen start
// --address` makes them; and this process as a driver attached to the first
// node. Health checks run every 100 ms. Everything stops at scope exit.
class MultiNodeCluster {
 public:
  struct NodeSpec {
    std::map<std::string, double> resources;  // CPU etc.; memory defaults to 1 GiB
    uint64_t store_bytes = 384ull << 20;
    std::map<std::string, std::string> env;  // for this node's daemon
    // Where this node reaches the head (a fault proxy in front of it, say);
    // empty: the head's own address. Not for the first node (it starts the head).
    std::string head_address;
  };
  explicit MultiNodeCluster(std::vector<NodeSpec> nodes,
                            std::map<std::string, std::string> env = {});
  ~MultiNodeCluster();
  // Starts one more node and waits until the head lists it; returns its index.
  size_t AddNode(const NodeSpec& spec);
  const std::string& node_id(size_t i) const { return node_ids_.at(i); }
  size_t index_of(const std::string& node_id) const;
  pid_t daemon_pid(size_t i) const;
  pid_t head_pid() const;
  std::string node_address(size_t i) const;
  std::string head_address() const { return head_address_; }
  // The port of the head's GET /metrics (served on 127.0.0.1), or -1.
  int head_metrics_port() const;
  // SIGKILLs node i's daemon (its workers die with it).
  void KillNode(size_t i);
  // SIGKILLs the head, then starts a new one on the same port: with none of
  // the old one's state (the nodes must join it again), or, `from_state`, from
  // the first head's write-ahead log (doc/reliability.md, item 6).
  void RestartHead(bool from_state = false);
  // SIGKILLs the head (the current one) and waits for it to go.
  void KillHead();
  // Starts a head on the same port again (after KillHead); see RestartHead.
  void StartHeadAgain(bool from_state);

 private:
  std::vector<std::pair<std::string, std::string>> saved_env_;
  std::string head_address_;
  std::vector<std::string> node_ids_;
  std::vector<std::unique_ptr<struct ClusterHandle>> clusters_;
  size_t head_index_ = 0;  // the cluster whose first process is the current head
};

// Polls `condition` until it holds or `timeout` passes; returns whether it held.
bool WaitUntil(const std::function<bool()>& condition,
               std::chrono::milliseconds timeout = std::chrono::seconds(20));

// Nanoseconds on the machine-wide monotonic clock (CLOCK_MONOTONIC): the same
// in every process of this machine, so times recorded by different workers of
// a loopback cluster compare.
int64_t NowNs();
// The regular files directly in `dir`; 0 when it does not exist.
size_t FilesIn(const std::string& dir);

// Children of `pid` (direct), from /proc; zombies only when asked.
std::vector<pid_t> ChildPids(pid_t pid, bool include_zombies = false);
// A reproducible byte pattern for checking that an object survived intact:
// byte `i` of the pattern seeded `seed`, and `size` bytes of it.
uint8_t PatternByte(uint64_t seed, uint64_t i);
std::vector<uint8_t> Pattern(uint64_t seed, uint64_t size);
// Regular files anywhere under `dir` (recursively); 0 when it does not exist.
size_t RegularFilesUnder(const std::string& dir);

// A scratch directory for barriers (and a gate file next to it), removed at
// scope exit, also when the test fails: $TMPDIR/lumen-<what>-<pid>.
struct Scratch {
  explicit Scratch(const std::string& what);
  ~Scratch();
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  std::string dir, gate;
};
// Every live process whose environment or command line mentions `needle`.
std::vector<pid_t> ProcessesMentioning(const std::string& needle);
// The session directories under $TMPDIR (or /tmp).
std::set<std::string> SessionDirs();
// Entries of /dev/shm whose name contains "lumen".
std::set<std::string> LumenShmEntries();

// A size field of /proc/PID/status ("VmRSS:", "VmHWM:") in bytes; 0 when the
// process or the field is not there. `pid` 0 means this process.
uint64_t ProcStatusBytes(pid_t pid, const std::string& field);

// Runs a command, returns its exit status and fills `output` with stdout+stderr.
int RunCommand(const std::string& command, std::string* output);

// Runs `lumen stop` (the given CLI) at scope exit, so a test that started a
// cluster with `lumen start` leaves nothing running even when it fails midway.
class StopClustersAtExit {
 public:
  explicit StopClustersAtExit(std::string cli) : cli_(std::move(cli)) {}
  ~StopClustersAtExit() {
    std::string ignored;
    RunCommand(cli_ + " stop", &ignored);
  }

 private:
  std::string cli_;
};

}  // namespace lumen::test
