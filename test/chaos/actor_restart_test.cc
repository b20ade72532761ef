// Issue 14, matrix item 3: actor restarts under SIGKILL. The actor records
// every call it runs ("pid sequence", one line appended to a file) so the
// test sees the order each incarnation received the calls in.
#include <signal.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "lumen/lumen.h"
#include "test/chaos/chaos_support.h"
#include "test/core/test_support.h"

namespace {

using lumen::test::chaos::AppendLine;
using lumen::test::chaos::ReadLines;

class Sequencer {
 public:
  explicit Sequencer(std::string log) : log_(std::move(log)) {}
  static Sequencer* Create(std::string log) { return new Sequencer(std::move(log)); }
  // ~3 ms of work per call, so that 1,000 calls outlast 10 kills and restarts.
  int64_t Record(int64_t sequence) {
    std::this_thread::sleep_for(std::chrono::milliseconds(3));
    AppendLine(log_, std::to_string(::getpid()) + " " + std::to_string(sequence));
    return sequence;
  }
  int Pid() { return static_cast<int>(::getpid()); }

 private:
  std::string log_;
};

struct Entry {
  pid_t pid;
  int64_t sequence;
};

std::vector<Entry> ReadEntries(const std::string& log) {
  std::vector<Entry> out;
  for (const auto& line : ReadLines(log)) {
    std::istringstream in(line);
    Entry e{};
    if (in >> e.pid >> e.sequence) out.push_back(e);
  }
  return out;
}

}  // namespace

LUMEN_REMOTE(Sequencer::Create, &Sequencer::Record, &Sequencer::Pid);

using lumen::test::ScopedCluster;
using lumen::test::WaitUntil;
using lumen::test::chaos::LeakCheck;
using lumen::test::chaos::ProcessGone;
using lumen::test::chaos::ScratchDir;

TEST_CASE("actor killer: 1000 sequenced calls through 10 restarts arrive in order", "[chaos]") {
  // Invariant: with max_restarts=-1 and max_task_retries=-1, SIGKILLing the
  // actor 10 times while 1,000 calls are pending loses none: each call's Get
  // returns its own sequence number; each incarnation receives the calls in
  // increasing order; an incarnation starts no later than one past where the
  // previous one stopped (interrupted calls are resent first, nothing is
  // skipped); together they received every sequence number.
  constexpr int kCalls = 1000;
  constexpr int kKills = 10;
  LeakCheck leaks;
  ScratchDir scratch("lumen-chaos");
  std::string session;
  {
    ScopedCluster cluster;
    session = cluster.session_dir();
    std::string log = scratch.path() + "/calls";
    auto actor = lumen::Actor(Sequencer::Create).SetMaxRestarts(-1).SetMaxTaskRetries(-1).Remote(log);
    std::vector<lumen::ObjectRef<int64_t>> refs;
    refs.reserve(kCalls);
    for (int64_t i = 1; i <= kCalls; ++i) refs.push_back(actor.Task(&Sequencer::Record).Remote(i));
    // Kill whenever another ~1/(kKills+1) of the calls has been recorded, each
    // time the incarnation that recorded the last one.
    std::set<pid_t> killed;
    for (int k = 1; k <= kKills; ++k) {
      INFO("kill " << k);
      size_t target = static_cast<size_t>(k) * kCalls / (kKills + 1);
      std::vector<Entry> entries;
      bool progressed = WaitUntil(
          [&] {
            entries = ReadEntries(log);
            return entries.size() >= target && !killed.contains(entries.back().pid);
          },
          std::chrono::seconds(30));
      INFO("recorded " << entries.size() << " calls, waiting for " << target
                       << "; last by pid " << (entries.empty() ? 0 : entries.back().pid));
      REQUIRE(progressed);
      pid_t pid = ReadEntries(log).back().pid;
      REQUIRE(::kill(pid, SIGKILL) == 0);
      killed.insert(pid);
    }
    auto results = lumen::Get(refs, std::chrono::seconds(120));
    for (int64_t i = 1; i <= kCalls; ++i) REQUIRE(*results[i - 1] == i);

    auto entries = ReadEntries(log);
    std::set<pid_t> incarnations;
    std::set<int64_t> received;
    int64_t last = 0;  // the previous entry's sequence
    pid_t pid = 0;
    for (size_t i = 0; i < entries.size(); ++i) {
      INFO("entry " << i << ": pid " << entries[i].pid << " sequence " << entries[i].sequence);
      if (entries[i].pid != pid) {
        // A new incarnation: it starts at or before the call after the last one seen.
        REQUIRE(incarnations.insert(entries[i].pid).second);  // never back to an old one
        REQUIRE(entries[i].sequence <= last + 1);
        pid = entries[i].pid;
      } else {
        REQUIRE(entries[i].sequence == last + 1);  // in order, nothing skipped
      }
      last = entries[i].sequence;
      received.insert(last);
    }
    CHECK(received.size() == static_cast<size_t>(kCalls));
    CHECK(incarnations.size() == kKills + 1);
    CHECK(*lumen::Get(actor.Task(&Sequencer::Record).Remote(kCalls + 1)) == kCalls + 1);
  }
  CHECK(leaks.Leaks(session) == "");
}

TEST_CASE("actor with max_restarts=2: the third kill is final", "[chaos]") {
  // Invariant: an actor with max_restarts=2 comes back after the first two
  // SIGKILLs (as a new process that answers calls) and stays dead after the
  // third: its calls then fail with ActorDiedError.
  LeakCheck leaks;
  ScratchDir scratch("lumen-chaos");
  std::string session;
  {
    ScopedCluster cluster;
    session = cluster.session_dir();
    auto actor = lumen::Actor(Sequencer::Create)
                     .SetMaxRestarts(2)
                     .SetMaxTaskRetries(-1)
                     .Remote(scratch.path() + "/calls");
    std::set<pid_t> pids;
    for (int kill = 1; kill <= 3; ++kill) {
      INFO("kill " << kill);
      pid_t pid = *lumen::Get(actor.Task(&Sequencer::Pid).Remote(), std::chrono::seconds(30));
      REQUIRE(pids.insert(pid).second);  // a new process each time
      REQUIRE(::kill(pid, SIGKILL) == 0);
      REQUIRE(WaitUntil([&] { return ProcessGone(pid); }, std::chrono::seconds(5)));
    }
    REQUIRE_THROWS_AS(lumen::Get(actor.Task(&Sequencer::Pid).Remote(), std::chrono::seconds(30)),
                      lumen::ActorDiedError);
    REQUIRE_THROWS_AS(lumen::Get(actor.Task(&Sequencer::Record).Remote(int64_t{1}),
                                 std::chrono::seconds(30)),
                      lumen::ActorDiedError);
  }
  CHECK(leaks.Leaks(session) == "");
}
