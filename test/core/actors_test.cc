// Actors on a real embedded cluster: creation, ordered calls, concurrency,
// handles as values, names, failures and restarts.
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <thread>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "lumen/common/process.h"
#include "lumen/lumen.h"
#include "test/core/test_support.h"

namespace {

class Counter {
 public:
  static Counter* Create(int start) { return new Counter(start); }
  static Counter* CreateOrThrow(int start) {
    if (start < 0) throw std::invalid_argument("start must be >= 0, got " + std::to_string(start));
    return new Counter(start);
  }
  int Add(int x) { return n_ += x; }
  int Get() const { return n_; }
  int Pid() const { return static_cast<int>(::getpid()); }
  // Records calls in arrival order; returns how many arrived.
  int Record(int seq) {
    seen_.push_back(seq);
    return static_cast<int>(seen_.size());
  }
  bool InOrder() const {
    for (size_t i = 0; i < seen_.size(); ++i)
      if (seen_[i] != static_cast<int>(i)) return false;
    return true;
  }
  int Fail(int x) {
    if (x > 0) throw std::runtime_error("refusing " + std::to_string(x));
    return x;
  }
  int AddAndExit(int x) {
    n_ += x;
    lumen::ExitActor();
    return n_;
  }

 private:
  explicit Counter(int start) : n_(start) {}
  int n_;
  std::vector<int> seen_;
};

// Each call waits until `n` calls are inside at once (or a deadline passes).
class Rendezvous {
 public:
  static Rendezvous* Create() { return new Rendezvous(); }
  bool Meet(int n) {
    std::unique_lock<std::mutex> lock(mu_);
    ++inside_;
    cv_.notify_all();
    return cv_.wait_for(lock, std::chrono::seconds(10), [&] { return inside_ >= n; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int inside_ = 0;
};

// An actor whose methods end its process in the ways a real bug would.
class Crasher {
 public:
  static Crasher* Create() { return new Crasher(); }
  int Pid() const { return static_cast<int>(::getpid()); }
  int Segfault() {
    NoCoreDump();
    ::raise(SIGSEGV);
    return 0;
  }
  int Abort() {
    NoCoreDump();
    std::abort();
  }
  int ExitZero() { std::exit(0); }

 private:
  static void NoCoreDump() {
    rlimit none{0, 0};
    ::setrlimit(RLIMIT_CORE, &none);
  }
};

int AddThroughHandle(lumen::ActorHandle<Counter> counter, int x) {
  return *lumen::Get(counter.Task(&Counter::Add).Remote(x));
}

int AddThroughName(std::string name, int x) {
  auto counter = lumen::GetActor<Counter>(name);
  return *lumen::Get(counter.Task(&Counter::Add).Remote(x));
}

}  // namespace

LUMEN_REMOTE(Counter::Create, Counter::CreateOrThrow, &Counter::Add, &Counter::Get, &Counter::Pid,
             &Counter::Record, &Counter::InOrder, &Counter::Fail, &Counter::AddAndExit,
             Rendezvous::Create, &Rendezvous::Meet, AddThroughHandle, AddThroughName);
LUMEN_REMOTE(Crasher::Create, &Crasher::Pid, &Crasher::Segfault, &Crasher::Abort,
             &Crasher::ExitZero);

using lumen::test::ScopedCluster;
using lumen::test::WaitUntil;

TEST_CASE("an actor keeps state across calls in its own process") {
  ScopedCluster cluster;
  auto counter = lumen::Actor(Counter::Create).Remote(10);
  auto r = counter.Task(&Counter::Add).Remote(5);
  REQUIRE(*lumen::Get(r) == 15);
  REQUIRE(*lumen::Get(counter.Task(&Counter::Add).Remote(1)) == 16);
  REQUIRE(*lumen::Get(counter.Task(&Counter::Get).Remote()) == 16);
  REQUIRE(*lumen::Get(counter.Task(&Counter::Pid).Remote()) != ::getpid());
}

// The voluntary context switches of all threads of `pid` so far (each is a
// thread going to sleep after it woke up); -1 when the process is gone.
static long VoluntarySwitches(int pid) {
  long total = 0;
  std::error_code ec;
  std::filesystem::directory_iterator tasks("/proc/" + std::to_string(pid) + "/task", ec);
  if (ec) return -1;
  for (const auto& task : tasks) {
    std::ifstream status(task.path() / "status");
    std::string line;
    while (std::getline(status, line)) {
      if (line.rfind("voluntary_ctxt_switches:", 0) == 0) total += std::stol(line.substr(24));
    }
  }
  return total;
}

TEST_CASE("an idle actor's worker sleeps instead of waking on timers") {
  // Invariant: an actor with no calls wakes at most about once a second in
  // all (the task-event flusher's period; its executor waits untimed for a
  // call). Its executor thread used to wake every 200 ms: 15 wake-ups in 3 s
  // before the other threads' few; 10,000 idle actors so kept 2 cores busy.
  ScopedCluster cluster;
  auto counter = lumen::Actor(Counter::Create).Remote(0);
  const int pid = *lumen::Get(counter.Task(&Counter::Pid).Remote());
  // Let the call's aftermath (its reply written, task events flushed) pass.
  REQUIRE(*lumen::Get(counter.Task(&Counter::Get).Remote()) == 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  const long before = VoluntarySwitches(pid);
  REQUIRE(before >= 0);
  // A measurement window, not synchronisation.
  std::this_thread::sleep_for(std::chrono::seconds(3));
  const long after = VoluntarySwitches(pid);
  REQUIRE(after >= 0);
  INFO("wake-ups of the idle actor's worker in 3 s: " << after - before);
  CHECK(after - before <= 8);
  REQUIRE(*lumen::Get(counter.Task(&Counter::Add).Remote(2)) == 2);  // it still answers
}

// The sockets this process has open now.
static int OpenSockets() {
  int n = 0;
  for (const auto& fd : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    auto target = std::filesystem::read_symlink(fd.path(), ec);
    if (!ec && target.string().rfind("socket:", 0) == 0) ++n;
  }
  return n;
}

TEST_CASE("an owner calls its actors over the connection that created them") {
  // Invariant: the owner of N actors holds about N connections to them, not
  // 2N: calls go over the link that pushed the creation. With two each, an
  // owner of 10,000 actors needed 20,000 descriptors, the machine's limit.
  constexpr int kActors = 20;
  ScopedCluster cluster;
  // The cluster's own connections first (node, store, peers).
  REQUIRE(*lumen::Get(lumen::Actor(Counter::Create).Remote(0).Task(&Counter::Get).Remote()) == 0);
  const int before = OpenSockets();
  std::vector<lumen::ActorHandle<Counter>> actors;
  std::vector<lumen::ObjectRef<int>> calls;
  for (int i = 0; i < kActors; ++i) {
    actors.push_back(lumen::Actor(Counter::Create).Remote(i));
    calls.push_back(actors.back().Task(&Counter::Add).Remote(1));
  }
  for (int i = 0; i < kActors; ++i) REQUIRE(*lumen::Get(calls[i]) == i + 1);
  const int opened = OpenSockets() - before;
  INFO("sockets opened for " << kActors << " actors: " << opened);
  CHECK(opened >= kActors - 4);  // one each (give or take the cluster's own)
  CHECK(opened <= kActors + 4);
  // A second round of calls goes over the same connections.
  for (int i = 0; i < kActors; ++i) REQUIRE(*lumen::Get(actors[i].Task(&Counter::Get).Remote()) == i + 1);
  CHECK(OpenSockets() - before <= kActors + 4);
}

TEST_CASE("10000 calls from one caller run in submission order") {
  ScopedCluster cluster;
  auto counter = lumen::Actor(Counter::Create).Remote(0);
  std::vector<lumen::ObjectRef<int>> refs;
  refs.reserve(10000);
  for (int i = 0; i < 10000; ++i) refs.push_back(counter.Task(&Counter::Record).Remote(i));
  auto results = lumen::Get(refs);
  for (int i = 0; i < 10000; ++i) REQUIRE(*results[i] == i + 1);
  REQUIRE(*lumen::Get(counter.Task(&Counter::InOrder).Remote()));
}

TEST_CASE("SetMaxConcurrency runs calls at once on a thread pool") {
  // Invariant: with max_concurrency 4, four calls are inside the actor together.
  ScopedCluster cluster;
  auto meeting = lumen::Actor(Rendezvous::Create).SetMaxConcurrency(4).Remote();
  std::vector<lumen::ObjectRef<bool>> refs;
  for (int i = 0; i < 4; ++i) refs.push_back(meeting.Task(&Rendezvous::Meet).Remote(4));
  for (const auto& met : lumen::Get(refs)) REQUIRE(*met);
  // A serial actor never has two calls inside.
  auto serial = lumen::Actor(Rendezvous::Create).Remote();
  auto a = serial.Task(&Rendezvous::Meet).Remote(2);
  auto b = serial.Task(&Rendezvous::Meet).Remote(2);
  REQUIRE_FALSE(*lumen::Get(a, std::chrono::seconds(30)));
}

TEST_CASE("a handle passed to a task is usable there") {
  ScopedCluster cluster;
  auto counter = lumen::Actor(Counter::Create).Remote(100);
  REQUIRE(*lumen::Get(lumen::Task(AddThroughHandle).Remote(counter, 7)) == 107);
  REQUIRE(*lumen::Get(counter.Task(&Counter::Get).Remote()) == 107);
}

TEST_CASE("a named actor is found from another task and a second one with the name fails") {
  ScopedCluster cluster;
  auto counter = lumen::Actor(Counter::Create).SetName("shared-counter").Remote(1);
  REQUIRE(*lumen::Get(lumen::Task(AddThroughName).Remote(std::string("shared-counter"), 2)) == 3);
  auto same = lumen::GetActor<Counter>("shared-counter");
  REQUIRE(*lumen::Get(same.Task(&Counter::Get).Remote()) == 3);
  try {
    lumen::Actor(Counter::Create).SetName("shared-counter").Remote(0);
    FAIL("a second actor with a taken name must fail");
  } catch (const lumen::Error& e) {
    REQUIRE(std::string(e.what()).find("shared-counter") != std::string::npos);
    REQUIRE(std::string(e.what()).find("already exists") != std::string::npos);
  }
  REQUIRE_THROWS_AS(lumen::GetActor<Counter>("no-such-actor"), lumen::Error);
}

TEST_CASE("kill -9 of an actor without restarts: the next call throws ActorDiedError at once") {
  ScopedCluster cluster;
  auto counter = lumen::Actor(Counter::Create).Remote(0);
  int pid = *lumen::Get(counter.Task(&Counter::Pid).Remote());
  REQUIRE(::kill(pid, SIGKILL) == 0);
  // "At once": the node's report of the death, not a timeout, ends the call;
  // the deadline is generous for a loaded machine but well below the Get's.
  auto start = std::chrono::steady_clock::now();
  try {
    lumen::Get(counter.Task(&Counter::Add).Remote(1), std::chrono::seconds(60));
    FAIL("the call should throw ActorDiedError");
  } catch (const lumen::ActorDiedError& e) {
    // The node daemon saw a SIGKILL it did not send.
    INFO(e.what());
    CHECK(std::string(e.what()).find("killed by SIGKILL (possibly the out-of-memory killer)") !=
          std::string::npos);
  }
  REQUIRE(std::chrono::steady_clock::now() - start < std::chrono::seconds(20));
  // Later calls fail the same way.
  REQUIRE_THROWS_AS(lumen::Get(counter.Task(&Counter::Get).Remote()), lumen::ActorDiedError);
}

TEST_CASE("an actor method that segfaults aborts or calls exit(0) fails with the cause its node saw") {
  // Invariant: ActorDiedError names how the actor's process ended, as its node
  // daemon reaped it, with the pid, the actor (and the call it was running)
  // and the node; later calls fail with the same cause.
  ScopedCluster cluster;
  std::string node = lumen::GetNodeId().substr(0, 12);
  struct Case {
    int (Crasher::*method)();
    std::string method_name;
    std::string actor_name;  // "" for an unnamed actor
    std::string cause;
  };
  std::vector<Case> cases = {
      {&Crasher::Segfault, "Crasher::Segfault", "", "killed by signal 11 (SIGSEGV)"},
      {&Crasher::Abort, "Crasher::Abort", "crash-abort", "killed by signal 6 (SIGABRT)"},
      {&Crasher::ExitZero, "Crasher::ExitZero", "", "exited with code 0"}};
  for (const auto& c : cases) {
    auto builder = lumen::Actor(Crasher::Create).SetMaxRestarts(0);
    if (!c.actor_name.empty()) builder.SetName(c.actor_name);
    auto actor = builder.Remote();
    int pid = *lumen::Get(actor.Task(&Crasher::Pid).Remote());
    try {
      lumen::Get(actor.Task(c.method).Remote(), std::chrono::seconds(30));
      FAIL("the call should throw ActorDiedError");
    } catch (const lumen::ActorDiedError& e) {
      std::string what = e.what();
      INFO(what);
      CHECK(what.find(c.cause) != std::string::npos);
      CHECK(what.find("died while running &" + c.method_name + ":") != std::string::npos);
      CHECK(what.find("(pid " + std::to_string(pid) + ",") != std::string::npos);
      CHECK(what.find(c.actor_name.empty() ? std::string("actor Crasher::Create,")
                                           : "actor '" + c.actor_name + "' (Crasher::Create)") !=
            std::string::npos);
      CHECK(what.find("on node " + node) != std::string::npos);
      CHECK(what.find("peer closed the connection") == std::string::npos);
    }
    try {
      lumen::Get(actor.Task(&Crasher::Pid).Remote(), std::chrono::seconds(30));
      FAIL("a later call should throw ActorDiedError");
    } catch (const lumen::ActorDiedError& e) {
      std::string what = e.what();
      INFO(what);
      CHECK(what.find("is dead: ") != std::string::npos);
      CHECK(what.find(c.cause) != std::string::npos);
    }
  }
}

TEST_CASE("kill -9 of an actor with restarts: the factory runs again and calls continue") {
  ScopedCluster cluster;
  auto counter =
      lumen::Actor(Counter::Create).SetMaxRestarts(2).SetMaxTaskRetries(2).Remote(10);
  REQUIRE(*lumen::Get(counter.Task(&Counter::Add).Remote(5)) == 15);
  int pid = *lumen::Get(counter.Task(&Counter::Pid).Remote());
  REQUIRE(::kill(pid, SIGKILL) == 0);
  // The state is reset to what the factory made from its original arguments.
  REQUIRE(*lumen::Get(counter.Task(&Counter::Add).Remote(1), std::chrono::seconds(30)) == 11);
  int new_pid = *lumen::Get(counter.Task(&Counter::Pid).Remote());
  REQUIRE(new_pid != pid);
  // Restarts are bounded.
  REQUIRE(::kill(new_pid, SIGKILL) == 0);
  REQUIRE(*lumen::Get(counter.Task(&Counter::Get).Remote(), std::chrono::seconds(30)) == 10);
  REQUIRE(::kill(*lumen::Get(counter.Task(&Counter::Pid).Remote()), SIGKILL) == 0);
  REQUIRE_THROWS_AS(lumen::Get(counter.Task(&Counter::Get).Remote(), std::chrono::seconds(30)),
                    lumen::ActorDiedError);
}

TEST_CASE("a method that throws fails only that call") {
  ScopedCluster cluster;
  auto counter = lumen::Actor(Counter::Create).Remote(3);
  try {
    lumen::Get(counter.Task(&Counter::Fail).Remote(9));
    FAIL("Get should throw");
  } catch (const lumen::TaskError& e) {
    REQUIRE(e.task_message() == "refusing 9");
  }
  REQUIRE(*lumen::Get(counter.Task(&Counter::Add).Remote(1)) == 4);
}

TEST_CASE("Kill ends the actor and says so") {
  ScopedCluster cluster;
  auto counter = lumen::Actor(Counter::Create).Remote(0);
  int pid = *lumen::Get(counter.Task(&Counter::Pid).Remote());
  counter.Kill();
  try {
    lumen::Get(counter.Task(&Counter::Add).Remote(1), std::chrono::seconds(10));
    FAIL("the call should fail");
  } catch (const lumen::ActorDiedError& e) {
    REQUIRE(std::string(e.what()).find("Kill") != std::string::npos);
  }
  REQUIRE(WaitUntil([&] { return !lumen::ProcessAlive(pid); }));
}

TEST_CASE("a factory that throws makes the actor's calls fail with its message") {
  ScopedCluster cluster;
  auto broken = lumen::Actor(Counter::CreateOrThrow).Remote(-1);
  try {
    lumen::Get(broken.Task(&Counter::Get).Remote(), std::chrono::seconds(10));
    FAIL("the call should fail");
  } catch (const lumen::ActorDiedError& e) {
    REQUIRE(std::string(e.what()).find("start must be >= 0") != std::string::npos);
  }
}

TEST_CASE("ExitActor ends the actor after the call returns") {
  ScopedCluster cluster;
  auto counter = lumen::Actor(Counter::Create).SetMaxRestarts(3).Remote(1);
  REQUIRE(*lumen::Get(counter.Task(&Counter::AddAndExit).Remote(1)) == 2);
  try {
    lumen::Get(counter.Task(&Counter::Get).Remote(), std::chrono::seconds(10));
    FAIL("the call should fail");
  } catch (const lumen::ActorDiedError& e) {
    REQUIRE(std::string(e.what()).find("on purpose") != std::string::npos);
  }
}

namespace {
int SlowValue(std::string gate) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!std::filesystem::exists(gate) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return 1;
}
}  // namespace
LUMEN_REMOTE(SlowValue);

TEST_CASE("calls waiting for arguments fail cleanly when their actor is killed") {
  ScopedCluster cluster;
  std::string gate = cluster.session_dir() + "/gate";
  auto counter = lumen::Actor(Counter::Create).Remote(0);
  REQUIRE(*lumen::Get(counter.Task(&Counter::Get).Remote()) == 0);
  auto slow = lumen::Task(SlowValue).Remote(gate);
  auto waiting = counter.Task(&Counter::Add).Remote(slow);  // not sent: its argument is pending
  counter.Kill();
  auto after = counter.Task(&Counter::Get).Remote();
  REQUIRE_THROWS_AS(lumen::Get(after, std::chrono::seconds(10)), lumen::ActorDiedError);
  REQUIRE_THROWS_AS(lumen::Get(waiting, std::chrono::seconds(10)), lumen::ActorDiedError);
  std::ofstream(gate) << "open";
  REQUIRE(*lumen::Get(slow) == 1);  // the waiting call's argument arrives after its failure
}

TEST_CASE("an actor whose handles are all gone ends") {
  ScopedCluster cluster;
  int pid = 0;
  {
    auto counter = lumen::Actor(Counter::Create).Remote(0);
    pid = *lumen::Get(counter.Task(&Counter::Pid).Remote());
    REQUIRE(lumen::ProcessAlive(pid));
  }
  REQUIRE(WaitUntil([&] { return !lumen::ProcessAlive(pid); }));
}

TEST_CASE("a detached actor outlives its handles and is found by name") {
  ScopedCluster cluster;
  int pid = 0;
  {
    auto keeper = lumen::Actor(Counter::Create)
                      .SetName("keeper")
                      .SetLifetime(lumen::ActorLifetime::kDetached)
                      .Remote(10);
    pid = *lumen::Get(keeper.Task(&Counter::Pid).Remote());
  }
  auto again = lumen::GetActor<Counter>("keeper");
  REQUIRE(*lumen::Get(again.Task(&Counter::Add).Remote(1)) == 11);
  REQUIRE(lumen::ProcessAlive(pid));
  again.Kill();
  REQUIRE(WaitUntil([&] { return !lumen::ProcessAlive(pid); }));
}

// Run as a separate driver by the next test: creates a detached actor and exits.
TEST_CASE("driver that leaves a detached actor behind", "[.]") {
  lumen::Init(lumen::Config{});  // joins the cluster in LUMEN_ADDRESS
  auto keeper = lumen::Actor(Counter::Create)
                    .SetName("survivor")
                    .SetLifetime(lumen::ActorLifetime::kDetached)
                    .Remote(10);
  REQUIRE(*lumen::Get(keeper.Task(&Counter::Add).Remote(5)) == 15);
  // A second one that the other driver kills without ever calling it.
  auto other = lumen::Actor(Counter::Create)
                   .SetName("survivor2")
                   .SetLifetime(lumen::ActorLifetime::kDetached)
                   .Remote(0);
  REQUIRE(*lumen::Get(other.Task(&Counter::Get).Remote()) == 0);
  lumen::Shutdown();
}

TEST_CASE("a detached actor outlives the driver that created it") {
  std::string out;
  lumen::test::StopClustersAtExit guard(LUMEN_CLI_PATH);
  REQUIRE(lumen::test::RunCommand(std::string(LUMEN_CLI_PATH) +
                                      " start --head --num-cpus 2 --object-store-memory 268435456",
                                  &out) == 0);
  INFO(out);
  REQUIRE(lumen::test::RunCommand(
              "LUMEN_ADDRESS=auto /proc/" + std::to_string(::getpid()) +
                  "/exe 'driver that leaves a detached actor behind'",
              &out) == 0);
  {
    lumen::Config config;
    config.address = "auto";
    lumen::Init(config);
    auto survivor = lumen::GetActor<Counter>("survivor");
    REQUIRE(*lumen::Get(survivor.Task(&Counter::Add).Remote(1), std::chrono::seconds(30)) == 16);
    survivor.Kill();
    REQUIRE_THROWS_AS(
        lumen::Get(survivor.Task(&Counter::Get).Remote(), std::chrono::seconds(30)),
        lumen::ActorDiedError);
    // Killed through the head's record: the actor ends and frees its name.
    lumen::GetActor<Counter>("survivor2").Kill();
    REQUIRE(WaitUntil([] {
      try {
        lumen::GetActor<Counter>("survivor2");
        return false;
      } catch (const lumen::Error&) {
        return true;
      }
    }));
    lumen::Shutdown();
  }
  REQUIRE(lumen::test::RunCommand(std::string(LUMEN_CLI_PATH) + " stop", &out) == 0);
}
