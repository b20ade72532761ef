// What the README and lumen.h promise and no other test checked: retries of
// running actor calls, task retries running out, handles passed to actors,
// driver threads, Buffer views into the store, placement-group removal of
// running tasks, the infeasible-demand warning, `lumen start --num-gpus`.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "lumen/common/process.h"
#include "lumen/lumen.h"
#include "test/core/test_support.h"

namespace {

using lumen::test::ScopedCluster;
using lumen::test::FilesIn;
using lumen::test::WaitUntil;

// An actor whose DieOnce kills its own process the first time it runs (it
// leaves `marker` naming the pid it ran in), and answers the next time.
class Fragile {
 public:
  static Fragile* Create() { return new Fragile(); }
  int Pid() { return static_cast<int>(::getpid()); }
  int DieOnce(std::string marker) {
    if (!std::filesystem::exists(marker)) {
      std::ofstream(marker) << ::getpid() << std::endl;
      ::raise(SIGKILL);
    }
    return static_cast<int>(::getpid());
  }
};

class Tally {
 public:
  static Tally* Create(int start) { return new Tally(start); }
  int Add(int x) { return n_ += x; }
  int Get() { return n_; }

 private:
  explicit Tally(int start) : n_(start) {}
  int n_;
};

// An actor that calls another actor through a handle it was given.
class Relay {
 public:
  static Relay* Create() { return new Relay(); }
  int AddVia(lumen::ActorHandle<Tally> tally, int x) {
    return *lumen::Get(tally.Task(&Tally::Add).Remote(x));
  }
  // Keeps the handle and uses it in later calls.
  bool Keep(lumen::ActorHandle<Tally> tally) {
    kept_ = tally;
    return true;
  }
  int AddToKept(int x) { return *lumen::Get(kept_.Task(&Tally::Add).Remote(x)); }

 private:
  lumen::ActorHandle<Tally> kept_;
};

// A task that leaves a file named after its pid in `dir`, then dies.
int AlwaysDie(std::string dir) {
  std::ofstream(dir + "/" + std::to_string(::getpid())).flush();
  ::raise(SIGKILL);
  return 0;
}

int Times(int a, int b) { return a * b; }

// Announces its pid in `dir`, then waits (up to a minute) for `gate`.
int PidThenAwait(std::string dir, std::string gate) {
  std::ofstream(dir + "/" + std::to_string(::getpid())).flush();
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!std::filesystem::exists(gate) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // polling a file: no event
  }
  return static_cast<int>(::getpid());
}

lumen::Buffer MakeBuffer(uint64_t size) {
  std::vector<uint8_t> bytes(size);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 7);
  return lumen::Buffer(std::move(bytes));
}

// Whether [data, data + size) lies inside one shared mapping of a store
// segment (a memfd, or a /dev/shm file) of this process.
bool InsideStoreMapping(const uint8_t* data, size_t size, std::string* mappings) {
  auto address = reinterpret_cast<uintptr_t>(data);
  std::ifstream maps("/proc/self/maps");
  std::string line;
  bool inside = false;
  while (std::getline(maps, line)) {
    if (line.find("memfd:") == std::string::npos && line.find("/dev/shm/") == std::string::npos) {
      continue;
    }
    *mappings += line + "\n";
    uintptr_t start = 0, end = 0;
    char dash;
    std::istringstream in(line);
    in >> std::hex >> start >> dash >> end;
    if (address >= start && address + size <= end) inside = true;
  }
  return inside;
}

std::string GpuViewOfTask() {
  const char* env = std::getenv("CUDA_VISIBLE_DEVICES");
  std::string ids;
  for (int id : lumen::GetGpuIds()) ids += (ids.empty() ? "" : ",") + std::to_string(id);
  return std::string(env ? env : "<unset>") + "|" + ids;
}

}  // namespace

LUMEN_REMOTE(Fragile::Create, &Fragile::Pid, &Fragile::DieOnce, Tally::Create, &Tally::Add,
             &Tally::Get, Relay::Create, &Relay::AddVia, &Relay::Keep, &Relay::AddToKept,
             AlwaysDie, Times, PidThenAwait, GpuViewOfTask, MakeBuffer);

TEST_CASE("SetMaxTaskRetries resubmits an actor call that was running when the actor died") {
  // Invariant: with max_task_retries 1, a call whose actor process died while
  // running it runs again in the restarted actor and answers; with 0 it fails
  // with ActorDiedError.
  ScopedCluster cluster;
  std::string marker = cluster.session_dir() + "/died-once";
  auto retried = lumen::Actor(Fragile::Create).SetMaxRestarts(1).SetMaxTaskRetries(1).Remote();
  int first_pid = *lumen::Get(retried.Task(&Fragile::Pid).Remote());
  int answered_in = *lumen::Get(retried.Task(&Fragile::DieOnce).Remote(marker), std::chrono::seconds(60));
  int died_in = 0;
  std::ifstream(marker) >> died_in;
  REQUIRE(died_in == first_pid);  // the call was running in the first instance
  REQUIRE(answered_in != first_pid);

  std::string marker2 = cluster.session_dir() + "/died-once-2";
  auto not_retried = lumen::Actor(Fragile::Create).SetMaxRestarts(1).SetMaxTaskRetries(0).Remote();
  REQUIRE_THROWS_AS(lumen::Get(not_retried.Task(&Fragile::DieOnce).Remote(marker2),
                               std::chrono::seconds(60)),
                    lumen::ActorDiedError);
  // The actor itself restarted and serves new calls.
  REQUIRE(*lumen::Get(not_retried.Task(&Fragile::Pid).Remote(), std::chrono::seconds(60)) > 0);
}

TEST_CASE("SetMaxRetries(2) on a task that always crashes runs it 3 times then throws WorkerCrashedError") {
  ScopedCluster cluster;
  std::string dir = cluster.session_dir() + "/attempts";
  std::filesystem::create_directories(dir);
  REQUIRE_THROWS_AS(lumen::Get(lumen::Task(AlwaysDie).SetMaxRetries(2).Remote(dir),
                               std::chrono::seconds(60)),
                    lumen::WorkerCrashedError);
  REQUIRE(FilesIn(dir) == 3);  // the first attempt and two retries, each in its own process
}

TEST_CASE("an actor handle passed to another actor is usable there and kept across calls") {
  ScopedCluster cluster;
  auto tally = lumen::Actor(Tally::Create).Remote(10);
  auto relay = lumen::Actor(Relay::Create).Remote();
  REQUIRE(*lumen::Get(relay.Task(&Relay::AddVia).Remote(tally, 5)) == 15);
  REQUIRE(*lumen::Get(relay.Task(&Relay::Keep).Remote(tally)));
  REQUIRE(*lumen::Get(relay.Task(&Relay::AddToKept).Remote(7)) == 22);
  REQUIRE(*lumen::Get(tally.Task(&Tally::Get).Remote()) == 22);
}

TEST_CASE("several driver threads submit, put and get at once") {
  // Invariant (lumen.h: "every function here may be called from any thread"):
  // eight threads each submitting tasks, putting objects and getting both get
  // their own answers.
  ScopedCluster cluster;
  constexpr int kThreads = 8, kPerThread = 100;
  std::atomic<int> wrong{0}, errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([t, &wrong, &errors] {
      try {
        std::vector<lumen::ObjectRef<int>> refs;
        for (int i = 0; i < kPerThread; ++i) refs.push_back(lumen::Task(Times).Remote(t, i));
        auto put = lumen::Put(std::vector<int>(1 << 18, t));  // 1 MiB: through the store
        auto values = lumen::Get(refs, std::chrono::seconds(120));
        for (int i = 0; i < kPerThread; ++i) wrong += *values[i] == t * i ? 0 : 1;
        auto back = lumen::Get(put);
        wrong += (back->size() == (1u << 18) && (*back)[12345] == t) ? 0 : 1;
      } catch (const std::exception&) {
        ++errors;
      }
    });
  }
  for (auto& th : threads) th.join();
  REQUIRE(errors == 0);
  REQUIRE(wrong == 0);
}

TEST_CASE("Get of a lumen::Buffer is a view into the store's mapping, not a copy") {
  ScopedCluster cluster;
  // Made by a task (so written to the store by a worker) and put by the driver.
  auto made = lumen::Task(MakeBuffer).Remote(uint64_t{8} << 20);
  std::vector<uint8_t> bytes(8u << 20);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 7);
  auto put = lumen::Put(lumen::Buffer(std::move(bytes)));
  for (const auto& ref : {made, put}) {
    auto got = lumen::Get(ref);
    REQUIRE(got->size() == (8u << 20));
    REQUIRE(got->data()[1000] == static_cast<uint8_t>(1000 * 7));
    std::string mappings;
    bool inside = InsideStoreMapping(got->data(), got->size(), &mappings);
    INFO("buffer at " << static_cast<const void*>(got->data()) << "; store mappings:\n" << mappings);
    CHECK(inside);
  }
}

TEST_CASE("RemovePlacementGroup ends the tasks running in it") {
  ScopedCluster cluster;
  auto group = lumen::CreatePlacementGroup({.bundles = {{{"CPU", 1}}}});
  REQUIRE(group.Wait(std::chrono::seconds(30)));
  std::string dir = cluster.session_dir() + "/in-group";
  std::string gate = cluster.session_dir() + "/gate";
  std::filesystem::create_directories(dir);
  auto ref = lumen::Task(PidThenAwait).SetPlacementGroup(group, 0).Remote(dir, gate);
  REQUIRE(WaitUntil([&] { return FilesIn(dir) == 1; }));
  pid_t pid = std::stoi(std::filesystem::directory_iterator(dir)->path().filename().string());
  lumen::RemovePlacementGroup(group.GetID());
  // It ends: its process goes, and Get fails instead of waiting for the gate.
  REQUIRE(WaitUntil([&] { return !lumen::ProcessAlive(pid); }, std::chrono::seconds(30)));
  try {
    lumen::Get(ref, std::chrono::seconds(30));
    FAIL("a task of a removed placement group must not finish");
  } catch (const lumen::GetTimeoutError&) {
    FAIL("Get timed out: the task was not ended");
  } catch (const lumen::Error& e) {
    INFO(e.what());
    SUCCEED();
  }
}

TEST_CASE("the driver warns about demand no node can meet") {
  // The warning goes to the driver's stderr: capture fd 2 into a file.
  ScopedCluster cluster;
  std::string log = cluster.session_dir() + "/driver-stderr";
  std::fflush(stderr);
  int saved = ::dup(2);
  int file = ::open(log.c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0600);
  REQUIRE(file >= 0);
  ::dup2(file, 2);
  ::close(file);
  auto ref = lumen::Task(Times).SetResource("unobtainium", 1).Remote(2, 3);
  auto contents = [&] {
    std::ifstream in(log);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  bool warned = WaitUntil([&] {
    return contents().find("no node in the cluster can run Times") != std::string::npos;
  });
  std::fflush(stderr);
  ::dup2(saved, 2);
  ::close(saved);
  INFO(contents());
  REQUIRE(warned);
  REQUIRE(contents().find("unobtainium") != std::string::npos);
}

TEST_CASE("lumen start --num-gpus declares GPUs that tasks get one by one") {
  std::string out;
  std::string cli = LUMEN_CLI_PATH;
  lumen::test::StopClustersAtExit guard(cli);
  REQUIRE(lumen::test::RunCommand(cli + " start --head --num-cpus 2 --num-gpus 2 "
                                        "--object-store-memory 67108864",
                                  &out) == 0);
  INFO(out);
  {
    lumen::Config config;
    config.address = "auto";
    lumen::Init(config);
    REQUIRE(lumen::ClusterResources()["GPU"] == 2);
    std::string view = *lumen::Get(lumen::Task(GpuViewOfTask).SetNumGpus(1).Remote());
    REQUIRE((view == "0|0" || view == "1|1"));
    lumen::Shutdown();
  }
  REQUIRE(lumen::test::RunCommand(cli + " stop", &out) == 0);
}
