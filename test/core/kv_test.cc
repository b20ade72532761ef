// lumen::kv against a live head: from the driver, tasks and actors; Wait woken
// by another task's Put; limits that refuse with their name while the head
// keeps serving.
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <future>
#include <string>
#include <optional>
#include <tuple>
#include <vector>

#include "lumen/lumen.h"
#include "test/core/test_support.h"

namespace {

using lumen::test::NowNs;

std::string PutFromTask(std::string key, std::string value, std::string ns) {
  lumen::kv::Put(key, value, ns);
  return lumen::kv::Get(key, ns).value_or("<missing>");
}

// Puts `key` and returns when it did (just before the request left).
int64_t PutAndStamp(std::string key, std::string ns) {
  int64_t at = NowNs();
  lumen::kv::Put(key, "go", ns);
  return at;
}

class Waiter {
 public:
  static Waiter* Create() { return new Waiter(); }
  // Announces itself under "<key>-started", then waits for `key`; returns
  // (found, when the wait request left, when the wait returned).
  std::tuple<bool, int64_t, int64_t> WaitFor(std::string key, std::string ns, int timeout_ms) {
    lumen::kv::Put(key + "-started", "1", ns);
    int64_t begin = NowNs();
    bool found = lumen::kv::Wait(key, std::chrono::milliseconds(timeout_ms), ns);
    return {found, begin, NowNs()};
  }
};

int Echo(int x) { return x; }

// Returns x at once, or, given a key, once that key exists (at most 30 s).
int EchoAfterKey(int x, std::string key, std::string ns) {
  if (!key.empty()) lumen::kv::Wait(key, std::chrono::seconds(30), ns);
  return x;
}

// The same, but waits for the key on a thread of its own (std::async): the
// executor's thread blocks outside the runtime, where it cannot flush what it
// holds.
int EchoAfterKeyOffThread(int x, std::string key, std::string ns) {
  return std::async(std::launch::async, [&] { return EchoAfterKey(x, key, ns); }).get();
}

// Restores an environment variable at scope exit.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    ::setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (old_) {
      ::setenv(name_, old_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

}  // namespace

LUMEN_REMOTE(PutFromTask, PutAndStamp, Waiter::Create, &Waiter::WaitFor, Echo, EchoAfterKey,
             EchoAfterKeyOffThread);

using lumen::test::ScopedCluster;

TEST_CASE("kv: put, get, delete and namespaces from the driver and from tasks") {
  ScopedCluster cluster;
  CHECK_FALSE(lumen::kv::Get("k").has_value());
  CHECK(lumen::kv::Put("k", "default"));
  CHECK(lumen::kv::Put("k", "in a", "a"));
  CHECK(lumen::kv::Get("k") == "default");
  CHECK(lumen::kv::Get("k", "a") == "in a");
  CHECK_FALSE(lumen::kv::Get("k", "b").has_value());

  // overwrite = false keeps the old value.
  CHECK_FALSE(lumen::kv::Put("k", "other", "a", /*overwrite=*/false));
  CHECK(lumen::kv::Get("k", "a") == "in a");

  // A task sees and writes the same store; binary values survive.
  std::string binary("x\0y\xff", 4);
  CHECK(*lumen::Get(lumen::Task(PutFromTask).Remote(std::string("t"), binary, std::string("a"))) ==
        binary);
  CHECK(lumen::kv::Get("t", "a") == binary);
  CHECK(lumen::kv::Exists("t", "a"));

  CHECK(lumen::kv::Delete("k", "a"));
  CHECK_FALSE(lumen::kv::Delete("k", "a"));
  CHECK_FALSE(lumen::kv::Get("k", "a").has_value());
  CHECK(lumen::kv::Get("k") == "default");  // the other namespace is untouched

  for (const char* key : {"grp/1", "grp/2", "grp/3", "grpx"}) lumen::kv::Put(key, "v", "p");
  CHECK(lumen::kv::Keys("grp/", "p") == std::vector<std::string>{"grp/1", "grp/2", "grp/3"});
  CHECK(lumen::kv::DeletePrefix("grp/", "p") == 3);
  CHECK(lumen::kv::Keys("", "p") == std::vector<std::string>{"grpx"});

  CHECK_THROWS_AS(lumen::kv::Put("", "v"), lumen::KvError);
}

// Invariant: a Wait that began before the key existed returns true, after the
// put was made and long before its timeout (it was answered by the put, not by
// polling or the timer).
TEST_CASE("kv: Wait in an actor is woken by a Put from another task") {
  ScopedCluster cluster;
  auto waiter = lumen::Actor(Waiter::Create).Remote();
  // The Put must come after the actor's Wait left, or the Wait finds the key at
  // once and proves nothing about waking: a round where the Put won the race is
  // run again under a new key.
  bool woken = false;
  for (int round = 0; round < 5 && !woken; ++round) {
    const std::string key = "go" + std::to_string(round);
    auto result = waiter.Task(&Waiter::WaitFor).Remote(key, std::string("w"), 30000);
    REQUIRE(lumen::kv::Wait(key + "-started", std::chrono::seconds(30), "w"));
    int64_t put_at = *lumen::Get(lumen::Task(PutAndStamp).Remote(key, std::string("w")));
    auto [found, begin, end] = *lumen::Get(result, std::chrono::seconds(30));
    CHECK(found);
    CHECK(end >= put_at);
    if (begin >= put_at) continue;  // the Put was first: not a wake-up
    woken = true;
    CHECK(end - begin < int64_t{10'000'000'000});  // woken, far from the 30 s timeout
  }
  REQUIRE(woken);
}

TEST_CASE("kv: Wait on a key nobody puts returns false at its timeout") {
  ScopedCluster cluster;
  auto start = std::chrono::steady_clock::now();
  CHECK_FALSE(lumen::kv::Wait("never", std::chrono::milliseconds(300), "w"));
  auto elapsed = std::chrono::steady_clock::now() - start;
  CHECK(elapsed >= std::chrono::milliseconds(300));
  CHECK(elapsed < std::chrono::seconds(5));
  // A zero timeout is a poll.
  CHECK_FALSE(lumen::kv::Wait("never", std::chrono::milliseconds(0), "w"));
  lumen::kv::Put("never", "now", "w");
  CHECK(lumen::kv::Wait("never", std::chrono::milliseconds(0), "w"));
}

TEST_CASE("kv: over-limit requests fail with the limit's name and value, the head keeps serving") {
  ScopedEnv ns_limit("LUMEN_KV_MAX_NAMESPACE_BYTES", "4096");
  ScopedCluster cluster;
  try {
    lumen::kv::Put("big", std::string(2 << 20, 'x'));
    FAIL("a 2 MiB value was accepted");
  } catch (const lumen::KvError& e) {
    CHECK(std::string(e.what()) ==
          "value of 2097152 bytes exceeds the key-value limit of 1048576 bytes "
          "(LUMEN_KV_MAX_VALUE_BYTES)");
  }
  CHECK_FALSE(lumen::kv::Get("big").has_value());

  // 1000-byte values cost 1000 + 2 + 64 bytes each: three fit in 4096, a fourth does not.
  for (int i = 0; i < 3; ++i) lumen::kv::Put("v" + std::to_string(i), std::string(1000, 'y'), "full");
  try {
    lumen::kv::Put("v3", std::string(1000, 'y'), "full");
    FAIL("the namespace took more than its limit");
  } catch (const lumen::KvError& e) {
    CHECK(std::string(e.what()) ==
          "namespace 'full' would hold 4264 bytes, over the key-value limit of 4096 bytes per "
          "namespace (LUMEN_KV_MAX_NAMESPACE_BYTES)");
  }
  CHECK_THROWS_WITH(lumen::kv::Put(std::string(2000, 'k'), "v"),
                    Catch::Contains("LUMEN_KV_MAX_KEY_BYTES"));

  // Still serving: the store, other namespaces and tasks.
  CHECK(lumen::kv::Get("v2", "full") == std::string(1000, 'y'));
  CHECK(lumen::kv::Put("fine", "yes", "other"));
  CHECK(lumen::kv::Get("fine", "other") == "yes");
  CHECK(*lumen::Get(lumen::Task(Echo).Remote(7)) == 7);
  // Deleting makes room again.
  CHECK(lumen::kv::Delete("v0", "full"));
  CHECK(lumen::kv::Put("v3", std::string(1000, 'y'), "full"));
}

// Short tasks queued ahead of `waiting_fn` (it waits for the key "go" of
// namespace `ns`, which the driver puts only after it got their results) and
// more behind it: the owner pipelines tasks to a worker (several wait in its
// queue, so replies are held) only while 32 or more are ready. Checks that
// every task finishes with its value.
void ShortTasksAroundOneWaitingForGo(int (*waiting_fn)(int, std::string, std::string),
                                     const std::string& ns) {
  constexpr int kShort = 40;
  std::vector<lumen::ObjectRef<int>> first, after;
  for (int i = 0; i < kShort; ++i) {
    first.push_back(lumen::Task(EchoAfterKey).Remote(i, std::string(), ns));
  }
  auto waiting = lumen::Task(waiting_fn).Remote(100, std::string("go"), ns);
  for (int i = 0; i < kShort; ++i) {
    after.push_back(lumen::Task(EchoAfterKey).Remote(i, std::string(), ns));
  }
  for (int i = 0; i < kShort; ++i) CHECK(*lumen::Get(first[i], std::chrono::seconds(10)) == i);
  lumen::kv::Put("go", "1", ns);
  CHECK(*lumen::Get(waiting, std::chrono::seconds(30)) == 100);
  for (int i = 0; i < kShort; ++i) CHECK(*lumen::Get(after[i], std::chrono::seconds(30)) == i);
}

// Invariant: a worker holds back the replies of short tasks only while it
// keeps running tasks; a task that waits (here a key-value Wait for a key its
// owner puts once it has those replies) sends them first. Held across the
// Wait, the driver's Get below would time out: no deadlock. (Without the
// flush it fails unless nothing happened to be held when the waiting task
// started.)
TEST_CASE("kv: a task's Wait sends the replies its worker held back first") {
  // The default hold, with a bound (60 s) past the Gets' deadlines: what is
  // tested is the Wait's flush, not the timer's. The workers inherit both.
  ScopedEnv hold("LUMEN_HOLD_REPLIES", "8");
  ScopedEnv bound("LUMEN_HOLD_REPLIES_MAX_US", "60000000");
  lumen::Config config = ScopedCluster::DefaultConfig();
  config.num_cpus = 1;  // one worker runs every task, in order
  ScopedCluster cluster(config);
  const std::string ns = "held";
  // Many short runs: the worker's thread knows EchoAfterKey is short.
  for (int round = 0; round < 3; ++round) {
    std::vector<lumen::ObjectRef<int>> refs;
    for (int i = 0; i < 50; ++i) refs.push_back(lumen::Task(EchoAfterKey).Remote(i, std::string(), ns));
    for (int i = 0; i < 50; ++i) REQUIRE(*lumen::Get(refs[i], std::chrono::seconds(30)) == i);
  }
  ShortTasksAroundOneWaitingForGo(EchoAfterKey, ns);
}

// Invariant: a held reply goes within LUMEN_HOLD_REPLIES_MAX_US whatever its
// worker does. Here the task behind the held ones waits for "go" on a thread
// of its own, so its executor thread cannot send what it holds; the driver
// puts "go" only once it has those results. Before held replies had a time
// bound this deadlocked (the Gets below timed out).
TEST_CASE("kv: replies held while a task waits on a thread of its own leave within the bound") {
  ScopedEnv hold("LUMEN_HOLD_REPLIES", "8");
  ScopedEnv bound("LUMEN_HOLD_REPLIES_MAX_US", "500");
  lumen::Config config = ScopedCluster::DefaultConfig();
  config.num_cpus = 1;  // one worker runs every task, in order
  ScopedCluster cluster(config);
  const std::string ns = "held-off-thread";
  for (int round = 0; round < 3; ++round) {  // both functions known short
    std::vector<lumen::ObjectRef<int>> refs;
    for (int i = 0; i < 50; ++i) {
      refs.push_back(lumen::Task(EchoAfterKey).Remote(i, std::string(), ns));
      refs.push_back(lumen::Task(EchoAfterKeyOffThread).Remote(i, std::string(), ns));
    }
    for (int i = 0; i < 100; ++i) REQUIRE(*lumen::Get(refs[i], std::chrono::seconds(30)) == i / 2);
  }
  ShortTasksAroundOneWaitingForGo(EchoAfterKeyOffThread, ns);
}
