// Actors on prestarted workers (issue 13): an actor's creation takes a worker
// the node started ahead of demand instead of starting a process for it, the
// node refills its pool in the background, and an actor's worker never runs
// later work.
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "lumen/common/process.h"
#include "lumen/lumen.h"
#include "lumen/node/worker_template.h"
#include "test/core/test_support.h"

namespace {

class PidActor {
 public:
  static PidActor* Create() { return new PidActor; }
  int Pid() const { return static_cast<int>(::getpid()); }
  // The variables a worker gets from its node, as this worker sees them.
  std::string Env() const {
    auto get = [](const char* name) {
      const char* v = std::getenv(name);
      return std::string(v != nullptr ? v : "unset");
    };
    return get("LUMEN_ROLE") + " " + get("LUMEN_WORKER_ID") + " " + get("LUMEN_FORK_SERVER_FD");
  }
};

int TaskPid() { return static_cast<int>(::getpid()); }

LUMEN_REMOTE(PidActor::Create, &PidActor::Pid, &PidActor::Env, TaskPid);

using lumen::test::ChildPids;
using lumen::test::ScopedCluster;
using lumen::test::WaitUntil;

// Sets LUMEN_PRESTART_WORKERS (read by the node daemon the cluster starts)
// for one test case.
struct PrestartWorkers {
  explicit PrestartWorkers(int n) { ::setenv("LUMEN_PRESTART_WORKERS", std::to_string(n).c_str(), 1); }
  ~PrestartWorkers() { ::unsetenv("LUMEN_PRESTART_WORKERS"); }
};

std::string Comm(pid_t pid) {
  std::string comm;
  std::ifstream(absl::StrCat("/proc/", pid, "/comm")) >> comm;
  return comm;
}

// The worker processes of this test's embedded cluster: the children of its
// daemons (only the node daemon has any), its worker template aside.
std::set<pid_t> WorkerPids() {
  std::set<pid_t> workers;
  for (pid_t daemon : ChildPids(::getpid())) {
    for (pid_t w : ChildPids(daemon)) {
      if (Comm(w) != lumen::node::kWorkerTemplateProcessName) workers.insert(w);
    }
  }
  return workers;
}

// The node daemon's worker template (its child named lumen-template), or 0.
pid_t TemplatePid() {
  for (pid_t daemon : ChildPids(::getpid())) {
    for (pid_t c : ChildPids(daemon)) {
      if (Comm(c) == lumen::node::kWorkerTemplateProcessName) return c;
    }
  }
  return 0;
}

// Whether `pid` was forked from a worker template (its environment block is
// the template's exec's, which named the template role).
bool ForkedFromTemplate(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/environ"), std::ios::binary);
  std::string env((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return env.find(std::string("LUMEN_ROLE=") + lumen::node::kWorkerTemplateRole) != std::string::npos;
}

TEST_CASE("an actor takes a prestarted worker, the pool refills, the worker is not reused") {
  // Invariant: with LUMEN_PRESTART_WORKERS=3 the node starts 3 workers for the
  // driver; an actor created then runs in one of them (no process is started
  // for it), a new worker replaces it in the pool afterwards, and once the
  // actor is killed no task runs in its process.
  PrestartWorkers pool(3);
  ScopedCluster cluster;
  REQUIRE(WaitUntil([] { return WorkerPids().size() == 3; }));
  const std::set<pid_t> prestarted = WorkerPids();

  auto actor = lumen::Actor(PidActor::Create).Remote();
  const pid_t actor_pid = *lumen::Get(actor.Task(&PidActor::Pid).Remote());
  INFO("actor pid " << actor_pid);
  CHECK(prestarted.contains(actor_pid));
  // The refill: a fourth worker, started after the take.
  REQUIRE(WaitUntil([&] { return WorkerPids().size() == 4; }));

  actor.Kill();
  REQUIRE(WaitUntil([&] { return !WorkerPids().contains(actor_pid); }));
  std::vector<lumen::ObjectRef<int>> pids;
  for (int i = 0; i < 20; ++i) pids.push_back(lumen::Task(TaskPid).Remote());
  for (const auto& pid : lumen::Get(pids)) CHECK(*pid != actor_pid);
}

TEST_CASE("without a prestarted pool an actor's creation starts its own worker") {
  // Invariant: LUMEN_PRESTART_WORKERS=0 starts no worker ahead of demand; the
  // actor's worker is started for it (the same test as above fails here, which
  // shows it can fail).
  PrestartWorkers pool(0);
  ScopedCluster cluster;
  CHECK(WorkerPids().empty());
  auto actor = lumen::Actor(PidActor::Create).Remote();
  const pid_t actor_pid = *lumen::Get(actor.Task(&PidActor::Pid).Remote());
  CHECK(WorkerPids().contains(actor_pid));
  CHECK(WorkerPids().size() == 1);  // no refill without a pool
}

TEST_CASE("workers forked from the worker template run actors and tasks, and a killed template loses no work") {
  // Invariant: once the node's worker template is up, new workers are forked
  // from it (their environment block is the template's), each with its own
  // worker id and the worker role (the template's socket variable gone);
  // actors and tasks on them answer; SIGKILL of the template mid-run loses no
  // work (workers are the daemon's children, exec'd until a new template is
  // ready) and a new template comes up; none is left after the cluster stops.
  PrestartWorkers pool(2);
  pid_t last_template = 0;
  {
    ScopedCluster cluster;
    REQUIRE(WaitUntil([] { return TemplatePid() != 0; }));
    const pid_t first_template = TemplatePid();
    std::vector<lumen::ActorHandle<PidActor>> actors;
    for (int i = 0; i < 6; ++i) actors.push_back(lumen::Actor(PidActor::Create).Remote());
    std::set<pid_t> actor_pids;
    std::set<std::string> worker_ids;
    int forked = 0;
    for (auto& actor : actors) {
      const pid_t pid = *lumen::Get(actor.Task(&PidActor::Pid).Remote());
      const std::string env = *lumen::Get(actor.Task(&PidActor::Env).Remote());
      INFO("actor pid " << pid << " env " << env);
      actor_pids.insert(pid);
      CHECK(env.rfind("worker ", 0) == 0);
      CHECK(env.size() > 7 + 6);
      CHECK(env.substr(env.size() - 6) == " unset");
      worker_ids.insert(env);
      if (ForkedFromTemplate(pid)) ++forked;
    }
    CHECK(actor_pids.size() == 6);
    CHECK(worker_ids.size() == 6);
    // The first two may be exec'd (prestarted before the template was ready).
    CHECK(forked >= 4);

    // Kill the template while work is in flight.
    std::vector<lumen::ObjectRef<int>> tasks;
    for (int i = 0; i < 20; ++i) tasks.push_back(lumen::Task(TaskPid).Remote());
    std::vector<lumen::ActorHandle<PidActor>> more;
    for (int i = 0; i < 3; ++i) more.push_back(lumen::Actor(PidActor::Create).Remote());
    REQUIRE(::kill(first_template, SIGKILL) == 0);
    for (int i = 0; i < 3; ++i) more.push_back(lumen::Actor(PidActor::Create).Remote());
    for (const auto& pid : lumen::Get(tasks)) CHECK(*pid > 0);
    for (auto& actor : more) CHECK(*lumen::Get(actor.Task(&PidActor::Pid).Remote()) > 0);
    for (auto& actor : actors) CHECK(*lumen::Get(actor.Task(&PidActor::Pid).Remote()) > 0);
    // A new template (started on the next launch after the old one was found dead).
    std::vector<lumen::ActorHandle<PidActor>> after;
    REQUIRE(WaitUntil([&] {
      after.push_back(lumen::Actor(PidActor::Create).Remote());
      (void)lumen::Get(after.back().Task(&PidActor::Pid).Remote());
      pid_t now = TemplatePid();
      return now != 0 && now != first_template;
    }));
    last_template = TemplatePid();
  }
  CHECK(!lumen::ProcessAlive(last_template));
}

}  // namespace
