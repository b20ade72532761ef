// Failures: tasks that throw, workers killed mid-task, malformed frames, and
// drivers that die. Each test states the invariant it checks.
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>

#include "lumen/common/head_client.h"
#include "lumen/lumen.h"
#include "test/core/test_support.h"

namespace {

int Throws(int x) {
  if (x < 0) throw std::out_of_range("negative input " + std::to_string(x));
  return x;
}

int Double(int x) { return 2 * x; }

// First attempt: records its pid in `path` and waits to be killed. A retry finds
// the file and returns 42.
int DieOnFirstAttempt(std::string path) {
  if (std::filesystem::exists(path)) return 42;
  {
    std::ofstream tmp(path + ".tmp");
    tmp << ::getpid() << "\n";
  }
  std::filesystem::rename(path + ".tmp", path);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return -1;
}

int Sum(int a, int b) { return a + b; }

pid_t ReadPid(const std::string& path) {
  std::ifstream in(path);
  pid_t pid = 0;
  in >> pid;
  return pid;
}

// Connects to a Unix socket and writes raw bytes; returns whether the peer then
// closed the connection.
bool SendRawAndExpectClose(const std::string& path, const std::string& bytes) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return false;
  }
  ssize_t ignored = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
  (void)ignored;
  timeval tv{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  char buf[256];
  ssize_t n;
  do {
    n = ::recv(fd, buf, sizeof(buf), 0);
  } while (n > 0);
  ::close(fd);
  return n == 0 || (n < 0 && errno == ECONNRESET);
}

std::string Frame(uint32_t length, uint32_t magic, const std::string& payload) {
  std::string out(8, '\0');
  std::memcpy(out.data(), &length, 4);
  std::memcpy(out.data() + 4, &magic, 4);
  return out + payload;
}

// Writes this process's pid to `path` (so the test knows which worker ran it).
void WritePid(const std::string& path) {
  {
    std::ofstream tmp(path + ".tmp");
    tmp << ::getpid() << "\n";
  }
  std::filesystem::rename(path + ".tmp", path);
}

// No core file is left behind by the crashes below.
void NoCoreDump() {
  rlimit none{0, 0};
  ::setrlimit(RLIMIT_CORE, &none);
}

int Segfault(std::string pid_file) {
  WritePid(pid_file);
  NoCoreDump();
  ::raise(SIGSEGV);
  return 0;
}

int Abort(std::string pid_file) {
  WritePid(pid_file);
  NoCoreDump();
  std::abort();
}

int ExitZero(std::string pid_file) {
  WritePid(pid_file);
  std::exit(0);
}

// An actor that exits with a given code from a method.
class Quitter {
 public:
  static Quitter* Create() { return new Quitter(); }
  int Pid() const { return static_cast<int>(::getpid()); }
  int Quit(int code) { std::exit(code); }
};

}  // namespace

LUMEN_REMOTE(Throws, Double, DieOnFirstAttempt, Sum, Segfault, Abort, ExitZero, Quitter::Create,
             &Quitter::Pid, &Quitter::Quit);

using lumen::test::ScopedCluster;
using lumen::test::WaitUntil;

TEST_CASE("a task that throws surfaces its type message and location on Get") {
  ScopedCluster cluster;
  auto ref = lumen::Task(Throws).Remote(-5);
  try {
    lumen::Get(ref);
    FAIL("Get should throw");
  } catch (const lumen::TaskError& e) {
    REQUIRE(e.exception_type() == "std::out_of_range");
    REQUIRE(e.task_message() == "negative input -5");
    REQUIRE(e.location().find("pid") != std::string::npos);
    REQUIRE(std::string(e.what()).find("negative input -5") != std::string::npos);
  }
  // The error flows into dependents; the worker pool is unharmed.
  REQUIRE_THROWS_AS(lumen::Get(lumen::Task(Double).Remote(ref)), lumen::TaskError);
  REQUIRE(*lumen::Get(lumen::Task(Throws).Remote(3)) == 3);
}

TEST_CASE("kill -9 of a worker mid-task: the task is retried and succeeds") {
  // Invariant: a worker death is noticed at once and the task runs again
  // (max_retries defaults to 3).
  ScopedCluster cluster;
  std::string marker = cluster.session_dir() + "/attempt";
  auto ref = lumen::Task(DieOnFirstAttempt).Remote(marker);
  REQUIRE(WaitUntil([&] { return std::filesystem::exists(marker); }));
  pid_t worker = ReadPid(marker);
  REQUIRE(worker > 0);
  REQUIRE(::kill(worker, SIGKILL) == 0);
  REQUIRE(*lumen::Get(ref, std::chrono::seconds(30)) == 42);
}

TEST_CASE("kill -9 of a worker mid-task without retries: Get throws WorkerCrashedError") {
  ScopedCluster cluster;
  std::string marker = cluster.session_dir() + "/attempt";
  auto ref = lumen::Task(DieOnFirstAttempt).SetMaxRetries(0).Remote(marker);
  REQUIRE(WaitUntil([&] { return std::filesystem::exists(marker); }));
  pid_t pid = ReadPid(marker);
  REQUIRE(::kill(pid, SIGKILL) == 0);
  auto start = std::chrono::steady_clock::now();
  try {
    lumen::Get(ref, std::chrono::seconds(30));
    FAIL("Get should throw WorkerCrashedError");
  } catch (const lumen::WorkerCrashedError& e) {
    // The node daemon saw a SIGKILL it did not send.
    std::string what = e.what();
    INFO(what);
    CHECK(what.find("killed by SIGKILL (possibly the out-of-memory killer)") != std::string::npos);
    CHECK(what.find("pid " + std::to_string(pid)) != std::string::npos);
  }
  // Noticed through the socket, not by a timeout.
  REQUIRE(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
  // Other tasks still run.
  REQUIRE(*lumen::Get(lumen::Task(Sum).Remote(1, 2)) == 3);
}

TEST_CASE("a task that segfaults aborts or calls exit(0) fails with the cause its node saw") {
  // Invariant: WorkerCrashedError names how the worker process ended, as its
  // node daemon reaped it, with the worker's pid, the task and the node.
  ScopedCluster cluster;
  std::string node = lumen::GetNodeId().substr(0, 12);
  struct Case {
    int (*function)(std::string);
    std::string name;
    std::string cause;
  };
  std::vector<Case> cases = {{Segfault, "Segfault", "killed by signal 11 (SIGSEGV)"},
                             {Abort, "Abort", "killed by signal 6 (SIGABRT)"},
                             {ExitZero, "ExitZero", "exited with code 0"}};
  for (const auto& c : cases) {
    std::string pid_file = cluster.session_dir() + "/" + c.name + ".pid";
    auto ref = lumen::Task(c.function).SetMaxRetries(0).Remote(pid_file);
    try {
      lumen::Get(ref, std::chrono::seconds(30));
      FAIL("Get should throw WorkerCrashedError");
    } catch (const lumen::WorkerCrashedError& e) {
      std::string what = e.what();
      INFO(what);
      CHECK(what.find(c.cause) != std::string::npos);
      CHECK(what.find("pid " + std::to_string(ReadPid(pid_file)) + ")") != std::string::npos);
      CHECK(what.find("task " + c.name + " ") != std::string::npos);
      CHECK(what.find("on node " + node) != std::string::npos);
      CHECK(what.find("max_retries=0") != std::string::npos);
      CHECK(what.find("peer closed the connection") == std::string::npos);
    }
  }
  // The pool is unharmed.
  REQUIRE(*lumen::Get(lumen::Task(Sum).Remote(1, 2)) == 3);
}

TEST_CASE("a task and an actor that crash on another node fail with the cause that node saw") {
  // Invariant: the owner asks the node daemon that granted the lease (here
  // another node's, over TCP), not its own.
  lumen::test::MultiNodeCluster::NodeSpec two_cpus;
  two_cpus.resources = {{"CPU", 2}};
  lumen::test::MultiNodeCluster cluster({two_cpus, two_cpus});
  auto scratch = std::filesystem::temp_directory_path() /
                 ("lumen-crash-test-" + std::to_string(::getpid()));
  std::filesystem::create_directories(scratch);
  struct RemoveAtExit {
    std::filesystem::path path;
    ~RemoveAtExit() { std::filesystem::remove_all(path); }
  } remove_scratch{scratch};
  std::string there = cluster.node_id(1);
  auto on_there = lumen::NodeAffinity(there, false);
  std::string pid_file = (scratch / "segfault.pid").string();
  auto ref = lumen::Task(Segfault).SetMaxRetries(0).SetSchedulingStrategy(on_there).Remote(pid_file);
  try {
    lumen::Get(ref, std::chrono::seconds(30));
    FAIL("Get should throw WorkerCrashedError");
  } catch (const lumen::WorkerCrashedError& e) {
    std::string what = e.what();
    INFO(what);
    CHECK(what.find("killed by signal 11 (SIGSEGV)") != std::string::npos);
    CHECK(what.find("(pid " + std::to_string(ReadPid(pid_file)) + ")") != std::string::npos);
    CHECK(what.find("on node " + there.substr(0, 12)) != std::string::npos);
  }
  auto actor = lumen::Actor(Quitter::Create).SetSchedulingStrategy(on_there).Remote();
  int pid = *lumen::Get(actor.Task(&Quitter::Pid).Remote());
  try {
    lumen::Get(actor.Task(&Quitter::Quit).Remote(3), std::chrono::seconds(30));
    FAIL("the call should throw ActorDiedError");
  } catch (const lumen::ActorDiedError& e) {
    std::string what = e.what();
    INFO(what);
    CHECK(what.find("exited with code 3") != std::string::npos);
    CHECK(what.find("(pid " + std::to_string(pid) + ", actor Quitter::Create, on node " +
                    there.substr(0, 12) + ")") != std::string::npos);
  }
}

TEST_CASE("malformed and oversized frames close one connection and the daemons keep serving") {
  ScopedCluster cluster;
  auto nodes = lumen::runtime::QueryNodes(lumen::internal::ClusterAddress());
  REQUIRE(nodes.ok());
  REQUIRE(nodes->size() == 1);
  std::string node_socket = lumen::ParseAddress(nodes->front().address).unix_path;
  const uint32_t kMagic = 0x4c4d4e46;
  // Not a Lumen frame at all.
  REQUIRE(SendRawAndExpectClose(node_socket, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"));
  // A header announcing 1 GiB: over the frame limit.
  REQUIRE(SendRawAndExpectClose(node_socket, Frame(1u << 30, kMagic, "")));
  // A well-framed payload that is not a valid Cap'n Proto message.
  REQUIRE(SendRawAndExpectClose(node_socket,
                                Frame(24, kMagic, std::string("\xff\xff\xff\x7f") +
                                                      std::string(20, '\x41'))));
  // A length that is not a multiple of 8.
  REQUIRE(SendRawAndExpectClose(node_socket, Frame(13, kMagic, std::string(13, 'x'))));
  // The daemon and its existing clients are fine.
  REQUIRE(*lumen::Get(lumen::Task(Sum).Remote(20, 22)) == 42);
  auto stats = lumen::runtime::QueryNodeStats(node_socket);
  REQUIRE(stats.ok());
  REQUIRE(stats->alive);
}

TEST_CASE("Shutdown leaves no process session directory socket or shared memory behind") {
  auto shm_before = lumen::test::LumenShmEntries();
  std::string session;
  {
    ScopedCluster cluster;
    session = cluster.session_dir();
    REQUIRE(!session.empty());
    REQUIRE(*lumen::Get(lumen::Task(Sum).Remote(1, 1)) == 2);
    REQUIRE(!lumen::test::ProcessesMentioning(session).empty());
  }
  REQUIRE_FALSE(std::filesystem::exists(session));
  REQUIRE(lumen::test::ChildPids(::getpid()).empty());
  REQUIRE(WaitUntil([&] { return lumen::test::ProcessesMentioning(session).empty(); }));
  REQUIRE(lumen::test::LumenShmEntries() == shm_before);
  // And Init works again after Shutdown.
  ScopedCluster again;
  REQUIRE(*lumen::Get(lumen::Task(Sum).Remote(2, 2)) == 4);
}

// Run as a separate driver process by the next test; hidden from normal runs.
TEST_CASE("driver that waits to be killed", "[.]") {
  ScopedCluster cluster;
  REQUIRE(*lumen::Get(lumen::Task(Sum).Remote(1, 1)) == 2);
  std::string out = std::getenv("LUMEN_TEST_OUT");
  {
    std::ofstream tmp(out + ".tmp");
    tmp << cluster.session_dir() << "\n";
  }
  std::filesystem::rename(out + ".tmp", out);
  std::this_thread::sleep_for(std::chrono::seconds(120));  // until the parent kills us
}

TEST_CASE("SIGKILL of the driver tears its embedded cluster down") {
  // Invariant: the daemons watch their parent; when it dies without Shutdown they
  // stop their workers, exit, and remove the session directory.
  std::string out = (std::filesystem::temp_directory_path() /
                     ("lumen-test-out-" + std::to_string(::getpid())))
                        .string();
  std::filesystem::remove(out);
  pid_t child = ::fork();
  if (child == 0) {
    ::setenv("LUMEN_TEST_OUT", out.c_str(), 1);
    ::execl("/proc/self/exe", "runtime_test", "driver that waits to be killed",
            static_cast<char*>(nullptr));
    std::_Exit(127);
  }
  REQUIRE(child > 0);
  bool started = WaitUntil([&] { return std::filesystem::exists(out); }, std::chrono::seconds(60));
  std::string session;
  {
    std::ifstream in(out);
    std::getline(in, session);
  }
  std::filesystem::remove(out);
  if (!started) ::kill(child, SIGKILL);
  REQUIRE(started);
  REQUIRE(!session.empty());
  REQUIRE(!lumen::test::ProcessesMentioning(session).empty());
  REQUIRE(::kill(child, SIGKILL) == 0);
  ::waitpid(child, nullptr, 0);
  REQUIRE(WaitUntil([&] { return lumen::test::ProcessesMentioning(session).empty(); }));
  REQUIRE(WaitUntil([&] { return !std::filesystem::exists(session); }));
}
