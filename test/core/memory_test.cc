// `lumen memory` and the store line of `lumen status` against a real node
// daemon whose small store spills: the rows of a job's objects carry the right
// size, owner, call site, reference counts and pinned/spilled state.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "lumen/lumen.h"
#include "lumen/objectstore/object_table.h"
#include "test/core/test_support.h"

namespace {

using lumen::test::MultiNodeCluster;
using lumen::test::RunCommand;
using lumen::test::WaitUntil;
namespace fs = std::filesystem;

constexpr uint64_t kMiB = 1ull << 20;

std::vector<uint8_t> MemoryTestBlob(uint64_t size) { return std::vector<uint8_t>(size, 3); }

LUMEN_REMOTE(MemoryTestBlob);

// The line of `listing` that mentions `ref`'s id (as `lumen memory` shortens
// it), or "" when none does.
template <class T>
std::string LineOf(const std::string& listing, const lumen::ObjectRef<T>& ref) {
  auto at = listing.find(ref.ID().Hex().substr(0, 16));
  if (at == std::string::npos) return "";
  auto start = listing.rfind('\n', at);
  start = start == std::string::npos ? 0 : start + 1;
  return listing.substr(start, listing.find('\n', at) - start);
}

bool Has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

// Invariant: every object of the job that is in a store is listed once by
// `lumen memory` with the size it was created with, its owner (this driver's
// pid and node), where it was created (the Put's line or the task's name), the
// owner's reference count, and whether the store pins it or holds it on disk
// only; `lumen status` shows the node's pinned and spilled bytes.
TEST_CASE("lumen memory lists a job's stored objects with owner, call site, refs, pins and spilling") {
  const std::string spill_dir =
      (fs::temp_directory_path() / absl::StrCat("lumen-memory-test-", ::getpid())).string();
  fs::create_directories(spill_dir);
  {
    // 48 MiB of store: the 8 MiB objects below do not all fit, the first ones spill.
    MultiNodeCluster cluster({{{{"CPU", 1}},
                               48 * kMiB,
                               {{"LUMEN_OBJECT_SPILLING_DIRECTORY", spill_dir},
                                {"LUMEN_OBJECT_STORE_FULL_GRACE_MS", "10000"}}}});
    const std::string cli = std::string(LUMEN_CLI_PATH) + " ";
    const std::string at = " --address " + cluster.head_address();
    const std::string node = cluster.node_id(0).substr(0, 12);
    const std::string driver = absl::StrCat("driver ", ::getpid(), " @ ", node);

    // Spilled first (lowest offsets), then pinned by a view, then a task's result.
    std::vector<lumen::ObjectRef<std::vector<uint8_t>>> puts;
    const int put_line = __LINE__ + 2;
    for (int i = 0; i < 6; ++i) {
      puts.push_back(lumen::Put(std::vector<uint8_t>(8 * kMiB, static_cast<uint8_t>(i))));
    }
    lumen::ArrayView<uint8_t> view = lumen::GetArray(puts.back());
    auto result = lumen::Task(MemoryTestBlob).Remote(uint64_t{3} * kMiB + 5);
    REQUIRE(lumen::Get(result)->size() == 3 * kMiB + 5);

    std::string out;
    REQUIRE(RunCommand(cli + "memory --top 50" + at, &out) == 0);
    INFO(out);
    // The node's summary: something is on disk and something is pinned.
    REQUIRE(Has(out, "Node " + node));
    REQUIRE(Has(out, "object store: "));
    REQUIRE_FALSE(Has(out, "spilled 0 B"));
    REQUIRE_FALSE(Has(out, "pinned 0 B"));

    // Every Put: its size, this driver, the Put's line, one local reference.
    const std::string site = absl::StrCat("Put at memory_test.cc:", put_line);
    int spilled = 0;
    for (size_t i = 0; i < puts.size(); ++i) {
      std::string line = LineOf(out, puts[i]);
      INFO("put " << i << ": " << line);
      REQUIRE(!line.empty());
      REQUIRE(Has(line, "8.0 MiB"));
      REQUIRE(Has(line, driver));
      REQUIRE(Has(line, site));
      REQUIRE(Has(line, "1 local, 0 borrowers"));
      REQUIRE(Has(line, node));
      if (Has(line, "SPILLED")) ++spilled;
    }
    // 48 MiB of puts and a 3 MiB result in a 48 MiB store: some are on disk only.
    REQUIRE(spilled >= 1);
    // The one viewed through GetArray is pinned, so it never spilled.
    std::string pinned = LineOf(out, puts.back());
    REQUIRE(Has(pinned, "SEALED"));
    REQUIRE(Has(pinned, "yes (1)"));
    // The task's result: made by a worker, owned by this driver, named by its task.
    std::string made = LineOf(out, result);
    INFO("result: " << made);
    REQUIRE(Has(made, "3.0 MiB"));
    REQUIRE(Has(made, driver));
    REQUIRE(Has(made, "task MemoryTestBlob"));

    // --top bounds the listing to the largest.
    REQUIRE(RunCommand(cli + "memory --top 1" + at, &out) == 0);
    REQUIRE(LineOf(out, result).empty());
    REQUIRE(Has(out, "(1 shown, --top 1)"));

    // `lumen status` carries the same per-node summary (from the node's reports).
    REQUIRE(WaitUntil([&] {
      RunCommand(cli + "status" + at, &out);
      return Has(out, "object store: ") && !Has(out, "spilled 0 B") && !Has(out, "pinned 0 B");
    }));
    (void)view;
  }
  std::error_code ec;
  fs::remove_all(spill_dir, ec);
}
