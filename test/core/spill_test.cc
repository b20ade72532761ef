// Object spilling end to end: real node daemons with 256 MiB stores, a driver
// that puts 8x that while holding every reference, readers on the same node
// and on another one, a pinned view under pressure, a SIGKILLed holder of
// views, and the spill files' lifetime.
#include <signal.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "lumen/common/head_client.h"
#include "lumen/lumen.h"
#include "test/core/test_support.h"

namespace {

using lumen::test::MultiNodeCluster;
using lumen::test::Pattern;
using lumen::test::PatternByte;
using lumen::test::WaitUntil;
namespace fs = std::filesystem;

constexpr uint64_t kMiB = 1ull << 20;

// A directory the nodes spill into, removed at scope exit.
struct SpillDir {
  SpillDir()
      : path((fs::temp_directory_path() / ("lumen-spill-test-" + std::to_string(::getpid())))
                 .string()) {
    fs::create_directories(path);
  }
  ~SpillDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  // Regular files anywhere under it.
  size_t Files() const { return lumen::test::RegularFilesUnder(path); }
  size_t Entries() const {
    size_t n = 0;
    for (const auto& e : fs::directory_iterator(path)) n += (void(e), 1);
    return n;
  }
  std::string path;
};

// Where it ran, and whether the object has the bytes Pattern(seed) gave it.
std::string CheckPattern(std::vector<uint8_t> bytes, uint64_t seed) {
  bool intact = true;
  for (uint64_t i = 0; i < bytes.size() && intact; ++i) intact = bytes[i] == PatternByte(seed, i);
  return lumen::GetNodeId() + (intact ? ":intact" : ":CORRUPT");
}

// Keeps the Buffers it is given (zero-copy views into its node's store).
class Holder {
 public:
  static Holder* Create() { return new Holder(); }
  int Hold(lumen::Buffer b) {
    held_.push_back(std::move(b));
    return static_cast<int>(::getpid());
  }

 private:
  std::vector<lumen::Buffer> held_;
};

LUMEN_REMOTE(CheckPattern, Holder::Create, &Holder::Hold);

MultiNodeCluster::NodeSpec SmallStore(const std::string& spill_dir, const std::string& grace_ms) {
  return {{{"CPU", 1}},
          256 * kMiB,
          {{"LUMEN_OBJECT_SPILLING_DIRECTORY", spill_dir},
           {"LUMEN_OBJECT_STORE_FULL_GRACE_MS", grace_ms}}};
}

}  // namespace

TEST_CASE("a 256 MiB store holds 2 GiB of referenced objects by spilling and all read back here and on another node") {
  SpillDir spill;
  {
    MultiNodeCluster cluster({SmallStore(spill.path, "5000"), SmallStore(spill.path, "5000")});
    const uint64_t size = 32 * kMiB;
    const int count = 64;  // 2 GiB
    // A view pinned before the pressure starts must survive it unchanged.
    auto pinned_ref = lumen::Put(Pattern(999, 16 * kMiB));
    lumen::ArrayView<uint8_t> pinned = lumen::GetArray(pinned_ref);
    const uint8_t* pinned_at = pinned.data();

    std::vector<lumen::ObjectRef<std::vector<uint8_t>>> refs;
    for (int i = 0; i < count; ++i) refs.push_back(lumen::Put(Pattern(i, size)));  // never fails
    REQUIRE(spill.Files() > 0);
    auto stats = lumen::runtime::QueryNodeStats(cluster.node_address(0));
    REQUIRE(stats.ok());
    CHECK(stats->store_used <= 256 * kMiB);

    // Same node: each reads back byte-identical (most from disk).
    for (int i = 0; i < count; ++i) {
      lumen::ArrayView<uint8_t> view = lumen::GetArray(refs[i]);
      REQUIRE(view.size() == size);
      bool intact = true;
      for (uint64_t j = 0; j < size && intact; ++j) intact = view[j] == PatternByte(i, j);
      INFO("object " << i);
      REQUIRE(intact);
    }
    // Another node: its tasks pull each object from node 0, which restores it.
    auto on1 = lumen::NodeAffinity(cluster.node_id(1), false);
    std::vector<lumen::ObjectRef<std::string>> checks;
    for (int i = 0; i < count; ++i) {
      checks.push_back(lumen::Task(CheckPattern).SetSchedulingStrategy(on1).Remote(refs[i],
                                                                                  uint64_t(i)));
    }
    for (int i = 0; i < count; ++i) {
      INFO("object " << i);
      REQUIRE(*lumen::Get(checks[i]) == cluster.node_id(1) + ":intact");
    }
    // The pinned view never moved nor changed.
    REQUIRE(pinned.data() == pinned_at);
    bool intact = true;
    for (uint64_t j = 0; j < pinned.size() && intact; ++j) intact = pinned[j] == PatternByte(999, j);
    REQUIRE(intact);

    // Freed objects take their spill files with them.
    refs.clear();
    checks.clear();
    REQUIRE(WaitUntil([&] { return spill.Files() == 0; }));
    // Spill again, then stop the cluster with the files there.
    for (int i = 0; i < 16; ++i) refs.push_back(lumen::Put(Pattern(i, size)));
    REQUIRE(spill.Files() > 0);
  }
  // The cluster stopped: no spill file nor spill directory is left.
  CHECK(spill.Files() == 0);
  CHECK(spill.Entries() == 0);
}

TEST_CASE("SIGKILL of a worker holding views releases its pins") {
  SpillDir spill;
  MultiNodeCluster cluster({SmallStore(spill.path, "3000")});
  auto holder = lumen::Actor(Holder::Create).Remote();
  auto big = lumen::Put(lumen::Buffer(Pattern(1, 120 * kMiB)));
  const int pid = *lumen::Get(holder.Task(&Holder::Hold).Remote(big));
  // The holder maps `big`: it cannot be spilled, so another 150 MiB cannot fit.
  REQUIRE_THROWS_AS(lumen::Put(Pattern(2, 150 * kMiB)), lumen::ObjectStoreFullError);
  REQUIRE(spill.Files() == 0);
  // Its process dies without a word: its pins go, `big` can be spilled.
  REQUIRE(::kill(pid, SIGKILL) == 0);
  auto second = lumen::Put(Pattern(2, 150 * kMiB));
  REQUIRE(spill.Files() > 0);
  auto again = lumen::Get(big);  // restored from disk, intact
  REQUIRE(again->size() == 120 * kMiB);
  REQUIRE(std::equal(again->data(), again->data() + again->size(), Pattern(1, 120 * kMiB).data()));
}
