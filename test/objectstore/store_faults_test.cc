// The object store under faults (issue 14, items 10-13), on real clusters: a
// node daemon per store, workers as processes, SIGKILL, fork and exec.
//
//   10 store full: a 64 MiB store given 4x its capacity while referenced
//      spills; pinned beyond capacity it answers ObjectStoreFullError after
//      the grace period; its pages are reserved up front; usage returns to 0.
//   11 clients dying with mappings: rounds of SIGKILLing a creator before seal
//      that also holds a sealed view; no fd is inherited across exec; a
//      SIGKILLed store leaves no segment behind.
//   12 sealed means immutable: a write into a Get view faults.
//   13 small /dev/shm: a store larger than /dev/shm's free space.
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <future>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "lumen/common/head_client.h"
#include "lumen/lumen.h"
#include "lumen/objectstore/segment_reserver.h"
#include "lumen/objectstore/store_server.h"
#include "test/chaos/chaos_support.h"
#include "test/core/test_support.h"

namespace {

using lumen::test::MultiNodeCluster;
using lumen::test::Pattern;
using lumen::test::PatternByte;
using lumen::test::WaitUntil;
namespace fs = std::filesystem;

constexpr uint64_t kMiB = 1ull << 20;

// A directory the nodes spill into, removed at scope exit.
struct SpillDir : lumen::test::chaos::ScratchDir {
  SpillDir() : ScratchDir("lumen-store-faults") {}
  // Regular files anywhere under it.
  size_t Files() const { return lumen::test::RegularFilesUnder(path()); }
};

bool Intact(const uint8_t* data, uint64_t size, uint64_t seed) {
  for (uint64_t i = 0; i < size; ++i) {
    if (data[i] != PatternByte(seed, i)) return false;
  }
  return true;
}

// One open fd of a process: its number, what it points at, its open flags.
struct FdInfo {
  int fd;
  std::string target;
  long flags;
};
std::vector<FdInfo> FdsOf(const std::string& pid) {
  std::vector<FdInfo> out;
  std::string dir = "/proc/" + pid + "/fd";
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return out;
  const int own = ::dirfd(d);
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] == '.') continue;
    int fd = std::atoi(e->d_name);
    if (pid == "self" && fd == own) continue;
    char buf[512];
    ssize_t n = ::readlink((dir + "/" + e->d_name).c_str(), buf, sizeof(buf) - 1);
    if (n < 0) continue;  // closed meanwhile
    buf[n] = '\0';
    std::ifstream info("/proc/" + pid + "/fdinfo/" + e->d_name);
    std::string key, value;
    long flags = -1;
    while (info >> key >> value) {
      if (key == "flags:") flags = std::strtol(value.c_str(), nullptr, 8);
    }
    out.push_back({fd, buf, flags});
  }
  ::closedir(d);
  return out;
}
std::vector<FdInfo> FdsOf(pid_t pid) { return FdsOf(std::to_string(pid)); }

// How many fds of each kind ("socket", "pipe", a file's path) `pid` holds.
std::map<std::string, int> FdKinds(pid_t pid) {
  std::map<std::string, int> kinds;
  for (const FdInfo& f : FdsOf(pid)) ++kinds[f.target.substr(0, f.target.find(':'))];
  return kinds;
}
std::string Describe(const std::map<std::string, int>& kinds) {
  std::string out;
  for (const auto& [kind, n] : kinds) out += kind + " x" + std::to_string(n) + ", ";
  return out;
}

bool IsStoreMemfd(const std::string& target) {
  return target.rfind("/memfd:lumen-store", 0) == 0;
}
// The inode of the store segment process `pid` holds open (0: none).
ino_t StoreInodeOf(pid_t pid) {
  for (const FdInfo& f : FdsOf(pid)) {
    if (!IsStoreMemfd(f.target)) continue;
    struct stat st;
    std::string path = "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(f.fd);
    if (::stat(path.c_str(), &st) == 0) return st.st_ino;
  }
  return 0;
}
// Whether any process on the machine still maps or holds the memfd `inode`
// (the kernel frees a memfd's memory when the last of them goes).
bool AnyProcessHoldsSegment(ino_t inode) {
  const std::string needle = " " + std::to_string(inode) + " ";
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string pid = entry.path().filename();
    if (pid.empty() || !std::isdigit(static_cast<unsigned char>(pid[0]))) continue;
    std::ifstream maps("/proc/" + pid + "/maps");
    std::string line;
    while (std::getline(maps, line)) {
      if (line.find("memfd:lumen-store") != std::string::npos && line.find(needle) != std::string::npos) {
        return true;
      }
    }
  }
  return false;
}

// The fds of this process above stdio that are not close-on-exec, as "fd -> target; ".
std::string InheritableFds(const std::string& pid) {
  std::string bad;
  for (const FdInfo& f : FdsOf(pid)) {
    if (f.fd > 2 && (f.flags < 0 || (f.flags & O_CLOEXEC) == 0)) {
      bad += std::to_string(f.fd) + " -> " + f.target + "; ";
    }
  }
  return bad;
}

// A task: what this worker would pass to a program it execs. Returns
// "<inheritable fds>|<the fds an exec'd `ls` sees>|<store memfds held>".
std::string WorkerFdReport() {
  std::string inheritable = InheritableFds("self");
  std::string seen;
  if (FILE* p = ::popen("ls /proc/self/fd", "r")) {
    char buf[64];
    while (std::fgets(buf, sizeof(buf), p) != nullptr) {
      std::string n(buf);
      while (!n.empty() && n.back() == '\n') n.pop_back();
      seen += n + ",";
    }
    ::pclose(p);
  }
  int memfds = 0;
  for (const FdInfo& f : FdsOf("self")) memfds += IsStoreMemfd(f.target);
  return inheritable + "|" + seen + "|" + std::to_string(memfds);
}

// An actor that dies with a half-written object and a pinned view.
class Victim {
 public:
  static Victim* Create() { return new Victim(); }
  // Starts a Put of `size` bytes whose writer stops halfway (the object stays
  // unsealed) and returns this process's pid once it is half written.
  int HalfPut(uint64_t size) {
    auto started = std::make_shared<std::promise<void>>();
    std::future<void> ready = started->get_future();
    std::thread([size, started] {
      lumen::internal::PutWithWriter(size, [&](uint8_t* out) {
        std::memset(out, 0xab, size / 2);
        started->set_value();
        for (;;) ::pause();  // never sealed: the process is killed here
      });
    }).detach();
    ready.wait();
    return static_cast<int>(::getpid());
  }
  // Keeps a zero-copy view of `b` (a pin on it in the store).
  int Hold(lumen::Buffer b) {
    held_.push_back(std::move(b));
    return static_cast<int>(::getpid());
  }

 private:
  std::vector<lumen::Buffer> held_;
};

LUMEN_REMOTE(WorkerFdReport, Victim::Create, &Victim::HalfPut, &Victim::Hold);

MultiNodeCluster::NodeSpec Node(uint64_t store_bytes, const std::string& spill_dir,
                                const std::string& grace_ms, double cpus = 2) {
  return {{{"CPU", cpus}},
          store_bytes,
          {{"LUMEN_OBJECT_SPILLING_DIRECTORY", spill_dir},
           {"LUMEN_OBJECT_STORE_FULL_GRACE_MS", grace_ms}}};
}

lumen::runtime::NodeView Stats(const MultiNodeCluster& cluster, size_t node = 0) {
  auto stats = lumen::runtime::QueryNodeStats(cluster.node_address(node));
  INFO("node stats: " << stats.status());
  REQUIRE(stats.ok());
  return *stats;
}

// Whether node 0's store holds `used` bytes in `objects` objects now (false
// also when the query fails: the caller polls).
bool StoreHolds(const MultiNodeCluster& cluster, uint64_t used, uint64_t objects) {
  auto stats = lumen::runtime::QueryNodeStats(cluster.node_address(0));
  return stats.ok() && stats->store_used == used && stats->store_objects == objects;
}

// Blocks of the store segment this process maps (the driver's fd of it).
uint64_t DriverSegmentBackedBytes() {
  for (const FdInfo& f : FdsOf("self")) {
    if (!IsStoreMemfd(f.target)) continue;
    struct stat st;
    if (::fstat(f.fd, &st) == 0) return static_cast<uint64_t>(st.st_blocks) * 512;
  }
  return 0;
}

}  // namespace

TEST_CASE("store full: a 64 MiB store given 4x its capacity spills, pinned beyond it fails typed "
          "after the grace, and usage returns to 0",
          "[store_faults][chaos]") {
  // Invariant: the segment is backed by memory before any object exists
  // (reserved up front); 4x the capacity put while referenced all succeeds
  // and reads back byte-identical; with more pinned than leaves room, a Put
  // gets ObjectStoreFullError after the grace period (the process is alive:
  // no SIGBUS); when every ref and view is gone the store holds 0 bytes, 0
  // objects and no spill file.
  SpillDir spill;
  lumen::test::chaos::LeakCheck leaks;  // the shared teardown check (test/chaos)
  std::string session;
  {
    MultiNodeCluster cluster({Node(64 * kMiB, spill.path(), "1000")});
    session = Stats(cluster).session_dir;
    REQUIRE(WaitUntil([] { return DriverSegmentBackedBytes() >= 64 * kMiB; },
                      std::chrono::seconds(10)));
    const uint64_t size = 15 * kMiB;
    std::vector<lumen::ObjectRef<std::vector<uint8_t>>> refs;
    for (int i = 0; i < 17; ++i) refs.push_back(lumen::Put(Pattern(i, size)));  // > 4x 64 MiB
    CHECK(spill.Files() > 0);
    CHECK(Stats(cluster).store_used <= 64 * kMiB);
    for (int i = 0; i < 17; ++i) {
      lumen::ArrayView<uint8_t> view = lumen::GetArray(refs[i]);
      INFO("object " << i);
      REQUIRE(view.size() == size);
      REQUIRE(Intact(view.data(), size, i));
    }

    // Three views pin 45 MiB: 30 MiB more cannot fit, whatever is spilled.
    std::vector<lumen::ArrayView<uint8_t>> views;
    for (int i = 0; i < 3; ++i) views.push_back(lumen::GetArray(refs[i]));
    auto start = std::chrono::steady_clock::now();
    REQUIRE_THROWS_AS(lumen::Put(Pattern(99, 30 * kMiB)), lumen::ObjectStoreFullError);
    auto waited = std::chrono::steady_clock::now() - start;
    CHECK(waited >= std::chrono::milliseconds(900));
    CHECK(waited < std::chrono::seconds(15));
    for (int i = 0; i < 3; ++i) REQUIRE(Intact(views[i].data(), size, i));
    CHECK(::kill(cluster.daemon_pid(0), 0) == 0);

    views.clear();
    refs.clear();
    REQUIRE(WaitUntil([&] { return StoreHolds(cluster, 0, 0); }));
    REQUIRE(WaitUntil([&] { return spill.Files() == 0; }));
  }
  CHECK(leaks.Leaks(session) == "");
}

TEST_CASE("store full with spilling broken: a typed ObjectStoreFullError after the grace, nothing "
          "lost, usage back to 0",
          "[store_faults][chaos]") {
  // Invariant: when spill files cannot be written (the spilling directory is
  // a regular file), a Put that does not fit fails with ObjectStoreFullError
  // after the grace period (not before), the node stays up, every object
  // already in the store reads back intact, and usage returns to 0 when the
  // refs go.
  SpillDir spill;
  const std::string not_a_dir = spill.path() + "/file";
  std::ofstream(not_a_dir) << "x";
  lumen::test::chaos::LeakCheck leaks;  // the shared teardown check (test/chaos)
  std::string session;
  {
    MultiNodeCluster cluster({Node(64 * kMiB, not_a_dir, "1000")});
    session = Stats(cluster).session_dir;
    const uint64_t size = 15 * kMiB;
    std::vector<lumen::ObjectRef<std::vector<uint8_t>>> refs;
    for (int i = 0; i < 4; ++i) refs.push_back(lumen::Put(Pattern(i, size)));  // 60 of 64 MiB
    for (int attempt = 0; attempt < 2; ++attempt) {
      INFO("attempt " << attempt);
      auto start = std::chrono::steady_clock::now();
      REQUIRE_THROWS_AS(lumen::Put(Pattern(9, size)), lumen::ObjectStoreFullError);
      CHECK(std::chrono::steady_clock::now() - start >= std::chrono::milliseconds(900));
    }
    CHECK(::kill(cluster.daemon_pid(0), 0) == 0);
    for (int i = 0; i < 4; ++i) {
      lumen::ArrayView<uint8_t> view = lumen::GetArray(refs[i]);
      INFO("object " << i);
      REQUIRE(Intact(view.data(), size, i));
    }
    refs.clear();
    REQUIRE(WaitUntil([&] { return StoreHolds(cluster, 0, 0); }));
    // With room again, a Put succeeds.
    auto after = lumen::Put(Pattern(10, size));
    CHECK(Intact(lumen::GetArray(after).data(), size, 10));
  }
  CHECK(leaks.Leaks(session) == "");
}

TEST_CASE("clients dying with mappings: a SIGKILLed creator's unsealed object is aborted and its "
          "pins released, round after round",
          "[store_faults][chaos]") {
  // Invariant: after each SIGKILL of a worker that holds an unsealed object
  // (its writer stopped halfway) and a zero-copy view of a sealed one, the
  // store's bytes and object count return to what the driver alone holds;
  // after all rounds, dropping the driver's ref frees everything (no pin of
  // a dead worker remains), and the node daemon holds as many fds as after
  // the first round (nothing of the dead workers stays open) and one segment fd.
  // Rounds: LUMEN_TEST_ROUNDS (default 200; each is an actor restart).
  int rounds = 200;
  if (const char* r = std::getenv("LUMEN_TEST_ROUNDS")) rounds = std::max(1, std::atoi(r));
  SpillDir spill;
  MultiNodeCluster::NodeSpec spec = Node(64 * kMiB, spill.path(), "1000");
  spec.env["LUMEN_PRESTART_WORKERS"] = "0";  // the actor is the node's only worker
  lumen::test::chaos::LeakCheck leaks;  // the shared teardown check (test/chaos)
  std::string session;
  {
    MultiNodeCluster cluster({spec});
    session = Stats(cluster).session_dir;
    auto sealed = lumen::Put(lumen::Buffer(Pattern(7, 4 * kMiB)));
    auto victim = lumen::Actor(Victim::Create).SetMaxRestarts(1 << 20).SetMaxTaskRetries(-1).Remote();
    const auto baseline = Stats(cluster);
    REQUIRE(baseline.store_objects == 1);
    const pid_t daemon = cluster.daemon_pid(0);
    std::map<std::string, int> daemon_fds;
    std::set<int> pids;
    for (int round = 0; round < rounds; ++round) {
      INFO("round " << round);
      const int creator = *lumen::Get(victim.Task(&Victim::HalfPut).Remote(uint64_t(6 * kMiB)));
      const int holder = *lumen::Get(victim.Task(&Victim::Hold).Remote(sealed));
      REQUIRE(creator == holder);
      REQUIRE(pids.insert(creator).second);  // a new process each round
      auto during = Stats(cluster);
      REQUIRE(during.store_objects == 2);  // the unsealed one is there
      if (round == 0) daemon_fds = FdKinds(daemon);
      if (round == rounds - 1) {
        // Same live workers as in round 0: no kind of fd grew, nothing of the
        // dead ones left open. (Fewer is no leak: round 0 may have caught a
        // short-lived connection, e.g. a stats query's, still open.)
        auto no_more_than_round_0 = [&] {
          for (const auto& [kind, n] : FdKinds(daemon)) {
            auto it = daemon_fds.find(kind);
            if (n > (it == daemon_fds.end() ? 0 : it->second)) return false;
          }
          return true;
        };
        bool same = WaitUntil(no_more_than_round_0, std::chrono::seconds(5));
        INFO("daemon fds in round 0: " << Describe(daemon_fds) << "; now: " << Describe(FdKinds(daemon)));
        REQUIRE(same);
      }
      REQUIRE(::kill(creator, SIGKILL) == 0);
      REQUIRE(WaitUntil([&] { return StoreHolds(cluster, baseline.store_used, baseline.store_objects); },
                        std::chrono::seconds(10)));
    }
    int memfds = 0;
    for (const FdInfo& f : FdsOf(daemon)) memfds += IsStoreMemfd(f.target);
    CHECK(memfds == 1);
    // No dead holder's pin keeps the sealed object: it goes with the last ref.
    sealed = lumen::ObjectRef<lumen::Buffer>();
    REQUIRE(WaitUntil([&] { return StoreHolds(cluster, 0, 0); }));
  }
  CHECK(leaks.Leaks(session) == "");
}

TEST_CASE("no fd crosses an exec: workers and the programs they run inherit no store fd or socket",
          "[store_faults][chaos]") {
  // Invariant: every fd above stdio of the node daemon, the head and a worker
  // is close-on-exec; a program a task execs sees only stdio (and the
  // directory `ls` opens); a worker holds exactly one segment fd (its own,
  // received from the daemon), none inherited.
  lumen::test::chaos::LeakCheck leaks;  // the shared teardown check (test/chaos)
  std::string session;
  {
    MultiNodeCluster cluster({Node(64 * kMiB, "", "1000")});
    session = Stats(cluster).session_dir;
    std::string report = *lumen::Get(lumen::Task(WorkerFdReport).Remote());
    INFO("worker report " << report);
    auto bar1 = report.find('|');
    auto bar2 = report.rfind('|');
    REQUIRE(bar1 != std::string::npos);
    REQUIRE(bar2 > bar1);
    CHECK(report.substr(0, bar1) == "");  // inheritable fds of the worker
    CHECK(report.substr(bar1 + 1, bar2 - bar1 - 1) == "0,1,2,3,");
    CHECK(report.substr(bar2 + 1) == "1");
    CHECK(InheritableFds(std::to_string(cluster.daemon_pid(0))) == "");
    CHECK(InheritableFds(std::to_string(cluster.head_pid())) == "");
  }
  CHECK(leaks.Leaks(session) == "");
}

TEST_CASE("a SIGKILLed store leaves no segment behind, and its node starts again",
          "[store_faults][chaos]") {
  // Invariant: once a node daemon is SIGKILLed (its workers die with it), no
  // process maps or holds its segment (the kernel frees it: memfd, never a
  // /dev/shm name), nothing named lumen appears in /dev/shm, and a node
  // started after it serves stores as before.
  const std::set<std::string> shm_before = lumen::test::LumenShmEntries();
  lumen::test::chaos::LeakCheck leaks;  // the shared teardown check (test/chaos)
  std::string session;
  {
    MultiNodeCluster cluster({Node(64 * kMiB, "", "1000"), Node(64 * kMiB, "", "1000")});
    session = Stats(cluster).session_dir;
    // A worker on node 1 maps its segment too.
    auto on1 = lumen::NodeAffinity(cluster.node_id(1), false);
    std::string report = *lumen::Get(lumen::Task(WorkerFdReport).SetSchedulingStrategy(on1).Remote());
    REQUIRE(report.substr(report.rfind('|') + 1) == "1");
    const ino_t segment = StoreInodeOf(cluster.daemon_pid(1));
    REQUIRE(segment != 0);
    REQUIRE(AnyProcessHoldsSegment(segment));
    cluster.KillNode(1);
    REQUIRE(WaitUntil([&] { return !AnyProcessHoldsSegment(segment); }, std::chrono::seconds(10)));
    CHECK(lumen::test::LumenShmEntries() == shm_before);
    size_t again = cluster.AddNode(Node(64 * kMiB, "", "1000"));
    auto there = lumen::NodeAffinity(cluster.node_id(again), false);
    std::string after = *lumen::Get(lumen::Task(WorkerFdReport).SetSchedulingStrategy(there).Remote());
    CHECK(after.substr(after.rfind('|') + 1) == "1");
  }
  CHECK(leaks.Leaks(session) == "");
}

TEST_CASE("sealed means immutable: a write into a Get view kills the writer with SIGSEGV",
          "[store_faults][chaos]") {
  // Invariant: a zero-copy view of a sealed object lies in the read-only
  // mapping: a process writing through it dies of SIGSEGV and the object's
  // bytes are unchanged for every reader.
  lumen::test::chaos::LeakCheck leaks;  // the shared teardown check (test/chaos)
  std::string session;
  {
    MultiNodeCluster cluster({Node(64 * kMiB, "", "1000")});
    session = Stats(cluster).session_dir;
    auto ref = lumen::Put(Pattern(5, 2 * kMiB));
    lumen::ArrayView<uint8_t> view = lumen::GetArray(ref);
    const uint8_t* at = view.data();
    pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      struct sigaction sa;
      std::memset(&sa, 0, sizeof(sa));
      sa.sa_handler = SIG_DFL;
      ::sigaction(SIGSEGV, &sa, nullptr);
      ::sigaction(SIGBUS, &sa, nullptr);
      *const_cast<volatile uint8_t*>(at + 12345) = 0;
      ::_exit(3);  // only if the write went through
    }
    int status = 0;
    REQUIRE(::waitpid(child, &status, 0) == child);
    INFO("child status " << status);
    REQUIRE(WIFSIGNALED(status));
    CHECK(WTERMSIG(status) == SIGSEGV);
    CHECK(Intact(view.data(), view.size(), 5));
    auto again = lumen::Get(ref);
    CHECK(Intact(again->data(), again->size(), 5));
  }
  CHECK(leaks.Leaks(session) == "");
}

TEST_CASE("small /dev/shm: a store larger than /dev/shm's free space starts and fills, or fails at "
          "start naming the shortfall",
          "[store_faults][chaos]") {
  // Invariant: /dev/shm's size does not bound the store (its segment is a
  // memfd); memory does. A node asked for /dev/shm's free space + 64 MiB
  // either starts with every page of its segment reserved (when the machine
  // has that much memory: a container with a small --shm-size) or `lumen
  // start` fails at once naming the shortfall and the container fix; it
  // never starts and dies later of SIGBUS.
  struct statvfs vfs;
  REQUIRE(::statvfs("/dev/shm", &vfs) == 0);
  const uint64_t shm_free = static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
  const uint64_t want = shm_free + 64 * kMiB;
  const uint64_t available = lumen::objectstore::AvailableMemoryBytes();
  INFO("/dev/shm free " << shm_free << ", store " << want << ", memory available " << available);
  if (want + 256 * kMiB < available && want <= (4ull << 30)) {
    // Enough memory (a container with a small /dev/shm): the store starts
    // with every page reserved, and every byte of it can be written.
    boost::asio::io_context io;
    lumen::objectstore::StoreOptions options{.bytes = want, .io = &io};
    options.reserve = lumen::objectstore::StoreOptions::Reserve::kAtStart;
    auto store = lumen::objectstore::StoreServer::Create(std::move(options));
    REQUIRE(store.ok());
    std::memset((*store)->segment().writable_base(), 0x5a, want);
    CHECK((*store)->segment().readonly_base()[want - 1] == 0x5a);
  } else {
    lumen::test::StopClustersAtExit stop(LUMEN_CLI_PATH);
    std::string out;
    int rc = lumen::test::RunCommand(std::string(LUMEN_CLI_PATH) +
                                         " start --head --num-cpus 1 --object-store-memory " +
                                         std::to_string(want) + " 2>&1",
                                     &out);
    INFO("lumen start: " << out);
    CHECK(rc != 0);
    CHECK_THAT(out, Catch::Contains("short by") && Catch::Contains("--object-store-memory") &&
                        Catch::Contains("docker run --memory"));
    CHECK(lumen::test::ProcessesMentioning(LUMEN_CLI_PATH).empty());
  }
}
