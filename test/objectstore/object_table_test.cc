#include "lumen/objectstore/object_table.h"

#include <sys/stat.h>

#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "lumen/common/format_bytes.h"
#include "lumen/common/ids.h"

namespace lumen::objectstore {
namespace {

constexpr ClientId kWriter = 1;
constexpr ClientId kReader = 2;
constexpr ClientId kOther = 3;

ObjectId MakeId(uint8_t n) {
  ObjectId id;
  id.mutable_data()[0] = n;
  id.mutable_data()[ObjectId::kSize - 1] = 0xab;
  return id;
}

absl::StatusCode Code(const absl::Status& s) { return s.code(); }
template <typename T>
absl::StatusCode Code(const absl::StatusOr<T>& s) {
  return s.status().code();
}

TEST_CASE("FormatBytes", "[object_table]") {
  CHECK(FormatBytes(0) == "0 B");
  CHECK(FormatBytes(1023) == "1023 B");
  CHECK(FormatBytes(1024) == "1.0 KiB");
  CHECK(FormatBytes(1536) == "1.5 KiB");
  CHECK(FormatBytes(3ull << 29) == "1.5 GiB");
  CHECK(FormatBytes(2ull << 40) == "2.0 TiB");
}

TEST_CASE("ObjectTable: create seal get release delete", "[object_table]") {
  ObjectTable table(nullptr, 1 << 20);
  const ObjectId id = MakeId(1);
  auto offset = table.Create(kWriter, id, 1000);
  REQUIRE(offset.ok());
  CHECK(table.Contains(id));
  CHECK(*table.GetState(id) == ObjectState::kCreated);
  CHECK(table.GetStats().num_objects == 1);
  CHECK(table.GetStats().num_pinned == 1);  // The creator's pin.
  CHECK(table.GetStats().used == 1024);

  CHECK(Code(table.Seal(kOther, id)) == absl::StatusCode::kFailedPrecondition);
  REQUIRE(table.Seal(kWriter, id).ok());
  CHECK(*table.GetState(id) == ObjectState::kSealed);
  CHECK(Code(table.Seal(kWriter, id)) == absl::StatusCode::kFailedPrecondition);
  CHECK(Code(table.Abort(kWriter, id)) == absl::StatusCode::kFailedPrecondition);
  CHECK(table.GetStats().num_pinned == 0);

  auto loc = table.Get(kReader, id);
  REQUIRE(loc.ok());
  CHECK(loc->offset == *offset);
  CHECK(loc->size == 1000);
  CHECK(table.GetStats().num_pinned == 1);
  table.Release(kReader, id);
  CHECK(table.GetStats().num_pinned == 0);
  table.Release(kReader, id);  // No pin left: no-op.
  table.Release(kOther, id);
  CHECK(table.Contains(id));

  table.Delete(id);
  CHECK_FALSE(table.Contains(id));
  CHECK(table.GetStats().used == 0);
  CHECK(table.GetStats().num_objects == 0);
  CHECK(Code(table.Get(kReader, id)) == absl::StatusCode::kNotFound);
  CHECK(Code(table.Seal(kWriter, id)) == absl::StatusCode::kNotFound);
  table.Delete(id);  // Absent: no-op.
}

TEST_CASE("ObjectTable: delete while pinned frees after the last release", "[object_table]") {
  ObjectTable table(nullptr, 1 << 20);
  const ObjectId id = MakeId(2);
  REQUIRE(table.Create(kWriter, id, 4096).ok());
  REQUIRE(table.Seal(kWriter, id).ok());
  REQUIRE(table.Get(kReader, id).ok());
  REQUIRE(table.Get(kReader, id).ok());  // Pinned twice by the same client.
  REQUIRE(table.Get(kOther, id).ok());
  CHECK(table.GetStats().num_pinned == 1);

  table.Delete(id);
  CHECK(table.Contains(id));
  CHECK(*table.GetState(id) == ObjectState::kDeletePending);
  CHECK(Code(table.Get(kOther, id)) == absl::StatusCode::kNotFound);
  CHECK(table.GetStats().used == 4096);

  table.Release(kReader, id);
  table.Release(kOther, id);
  CHECK(table.Contains(id));  // kReader still holds one pin.
  table.Release(kReader, id);
  CHECK_FALSE(table.Contains(id));
  CHECK(table.GetStats().used == 0);
  CHECK(table.GetStats().num_pinned == 0);

  // The id can be created again afterwards.
  CHECK(table.Create(kWriter, id, 10).ok());
}

TEST_CASE("ObjectTable: DisconnectClient drops pins and unsealed objects", "[object_table]") {
  ObjectTable table(nullptr, 1 << 20);
  const ObjectId sealed = MakeId(3), pending = MakeId(4), unsealed = MakeId(5),
                 kept = MakeId(6);
  for (const ObjectId& id : {sealed, pending}) {
    REQUIRE(table.Create(kWriter, id, 100).ok());
    REQUIRE(table.Seal(kWriter, id).ok());
    REQUIRE(table.Get(kReader, id).ok());
    REQUIRE(table.Get(kReader, id).ok());
  }
  REQUIRE(table.Create(kReader, unsealed, 100).ok());
  REQUIRE(table.Create(kWriter, kept, 100).ok());
  table.Delete(pending);
  CHECK(table.GetStats().num_objects == 4);
  CHECK(table.GetStats().num_pinned == 4);

  table.DisconnectClient(kReader);
  CHECK(table.Contains(sealed));  // Unpinned, but nobody deleted it.
  CHECK_FALSE(table.Contains(pending));
  CHECK_FALSE(table.Contains(unsealed));
  CHECK(table.Contains(kept));  // Another client's unsealed object.
  CHECK(table.GetStats().num_objects == 2);
  CHECK(table.GetStats().num_pinned == 1);
  CHECK(table.GetStats().used == 2 * 128);

  table.DisconnectClient(kWriter);
  CHECK_FALSE(table.Contains(kept));
  CHECK(table.GetStats().num_pinned == 0);
  table.Delete(sealed);
  CHECK(table.GetStats().used == 0);
  table.DisconnectClient(kOther);  // Unknown client: no-op.
}

TEST_CASE("ObjectTable: abort frees an unsealed object", "[object_table]") {
  ObjectTable table(nullptr, 1 << 20);
  const ObjectId id = MakeId(7);
  REQUIRE(table.Create(kWriter, id, 100).ok());
  CHECK(Code(table.Abort(kOther, id)) == absl::StatusCode::kFailedPrecondition);
  REQUIRE(table.Abort(kWriter, id).ok());
  CHECK_FALSE(table.Contains(id));
  CHECK(table.GetStats().used == 0);
  CHECK(table.GetStats().num_pinned == 0);
  CHECK(Code(table.Abort(kWriter, id)) == absl::StatusCode::kNotFound);
}

TEST_CASE("ObjectTable: delete of an unsealed object waits for seal or abort",
          "[object_table]") {
  ObjectTable table(nullptr, 1 << 20);
  const ObjectId a = MakeId(8), b = MakeId(9);
  REQUIRE(table.Create(kWriter, a, 100).ok());
  REQUIRE(table.Create(kWriter, b, 100).ok());
  table.Delete(a);
  table.Delete(b);
  CHECK(table.Contains(a));
  CHECK(Code(table.Get(kReader, a)) == absl::StatusCode::kNotFound);
  REQUIRE(table.Seal(kWriter, a).ok());
  CHECK_FALSE(table.Contains(a));
  REQUIRE(table.Abort(kWriter, b).ok());
  CHECK_FALSE(table.Contains(b));
  CHECK(table.GetStats().used == 0);
  CHECK(table.GetStats().num_pinned == 0);
}

TEST_CASE("ObjectTable: duplicate create and get of an unsealed object", "[object_table]") {
  ObjectTable table(nullptr, 1 << 20);
  const ObjectId id = MakeId(10);
  REQUIRE(table.Create(kWriter, id, 100).ok());
  CHECK(Code(table.Create(kOther, id, 100)) == absl::StatusCode::kAlreadyExists);
  CHECK(Code(table.Get(kReader, id)) == absl::StatusCode::kUnavailable);
  CHECK(Code(table.Get(kReader, MakeId(11))) == absl::StatusCode::kNotFound);
  REQUIRE(table.Seal(kWriter, id).ok());
  CHECK(Code(table.Create(kWriter, id, 100)) == absl::StatusCode::kAlreadyExists);
  CHECK(table.GetStats().num_objects == 1);
}

TEST_CASE("ObjectTable: store full gives a readable error", "[object_table]") {
  ObjectTable table(nullptr, 2ull << 30);
  for (uint8_t i = 0; i < 3; ++i) {
    REQUIRE(table.Create(kWriter, MakeId(20 + i), (2ull << 30) / 3 - 64).ok());
  }
  auto full = table.Create(kWriter, MakeId(30), 3ull << 29);
  REQUIRE(Code(full) == absl::StatusCode::kResourceExhausted);
  INFO(full.status().message());
  CHECK(full.status().message().find(
            "object store full: cannot fit an object of 1.5 GiB; 2.0 GiB of 2.0 GiB in use "
            "by 3 objects") != std::string_view::npos);
  CHECK_FALSE(table.Contains(MakeId(30)));
  CHECK(table.GetStats().num_objects == 3);
}

TEST_CASE("ObjectTable: reserves memory in the segment", "[object_table]") {
  auto seg = ShmSegment::Create("lumen-table-test", 1 << 20);
  REQUIRE(seg.ok());
  ObjectTable table(seg->get(), (*seg)->size());
  const ObjectId id = MakeId(40);
  auto offset = table.Create(kWriter, id, 5000);
  REQUIRE(offset.ok());
  std::memcpy((*seg)->writable_base() + *offset, "payload", 8);
  REQUIRE(table.Seal(kWriter, id).ok());
  auto loc = table.Get(kReader, id);
  REQUIRE(loc.ok());
  CHECK(std::string(reinterpret_cast<const char*>((*seg)->readonly_base() + loc->offset)) ==
        "payload");
  struct stat st;
  REQUIRE(fstat((*seg)->fd(), &st) == 0);
  CHECK(static_cast<uint64_t>(st.st_blocks) * 512 >= 5000);
}

// Invariant: the running counts of pinned objects and pinned bytes (kept on
// every create, seal, get, release, abort, delete, evict and disconnect, read
// by each node's store report in O(1)) always equal a full recount over the
// objects, whatever the order of operations.
TEST_CASE("ObjectTable: pinned counters equal a recount after a seeded random sequence",
          "[object_table]") {
  uint64_t seed = std::random_device{}();
  if (const char* s = std::getenv("LUMEN_TEST_SEED")) seed = std::strtoull(s, nullptr, 10);
  INFO("seed " << seed << " (rerun with LUMEN_TEST_SEED=" << seed << ")");
  std::mt19937_64 rng(seed);
  auto pick = [&](uint64_t n) { return std::uniform_int_distribution<uint64_t>(0, n - 1)(rng); };
  ObjectTable table(nullptr, 4 << 20);
  std::vector<ObjectId> ids;
  for (int i = 0; i < 64; ++i) ids.push_back(MakeId(static_cast<uint8_t>(i)));
  constexpr ClientId kClients = 4;
  // The recount, independent of the table's counters: every object with a pin.
  auto recount_objects = [&] {
    uint64_t pinned = 0;
    table.ForEachObject([&](const ObjectTable::ObjectInfo& o) { pinned += o.pins > 0 ? 1 : 0; });
    return pinned;
  };
  uint64_t pinned_steps = 0;
  for (int step = 0; step < 5000; ++step) {
    const ObjectId& id = ids[pick(ids.size())];
    const ClientId client = 1 + pick(kClients);
    switch (pick(8)) {
      case 0:
      case 1: (void)table.Create(client, id, 1 + pick(64 << 10)); break;
      case 2: (void)table.Seal(client, id); break;
      case 3: (void)table.Get(client, id); break;
      case 4: table.Release(client, id); break;
      case 5: table.Delete(id); break;
      case 6: pick(2) == 0 ? (void)table.Abort(client, id) : (void)table.Evict(id); break;
      default:
        if (pick(8) == 0) table.DisconnectClient(client);
        break;
    }
    INFO("step " << step);
    REQUIRE(table.PinnedBytes() == table.RecountPinnedBytes());
    REQUIRE(table.GetStats().num_pinned == recount_objects());
    REQUIRE(table.CheckInvariants().ok());
    if (table.PinnedBytes() > 0) ++pinned_steps;
  }
  CHECK(pinned_steps > 100);  // the sequence did pin things
  for (ClientId c = 1; c <= kClients; ++c) table.DisconnectClient(c);
  CHECK(table.PinnedBytes() == 0);
  CHECK(table.GetStats().num_pinned == 0);
}

}  // namespace
}  // namespace lumen::objectstore
