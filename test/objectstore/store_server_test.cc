// StoreServer under memory pressure: parked creates, eviction order, spilling
// and restoring through real files, pins, and a seeded random sequence that
// checks the allocator's and the table's invariants after every step.
#include "lumen/objectstore/store_server.h"

#include <sched.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <capnp/message.h>
#include <catch2/catch.hpp>

#include "lumen/common/ids.h"
#include "lumen/common/proto_util.h"
#include "lumen/common/task_events.h"
#include "store_request_builder.h"

namespace lumen::objectstore {
namespace {

namespace fs = std::filesystem;
constexpr uint64_t kKiB = 1024;
using Op = StoreOp;

// One store on its own io_context, spilling into a fresh temporary directory
// that the destructor removes.
class Harness {
 public:
  explicit Harness(uint64_t bytes, std::chrono::milliseconds grace = std::chrono::milliseconds(2000)) {
    std::string pattern = (fs::temp_directory_path() / "lumen-store-test-XXXXXX").string();
    REQUIRE(::mkdtemp(pattern.data()) != nullptr);
    dir_ = pattern;
    auto created = StoreServer::Create(
        StoreOptions{.bytes = bytes, .spill_dir = dir_, .full_grace = grace, .io = &io_});
    REQUIRE(created.ok());
    store_ = std::move(*created);
  }
  ~Harness() {
    store_.reset();
    std::error_code ignored;
    fs::remove_all(dir_, ignored);
  }

  StoreServer& store() { return *store_; }
  JobId job() const { return job_; }
  // The objects `client` creates from now on are owned by connection `owner`.
  void SetOwner(ClientId client, ClientId owner) { owners_[client] = owner; }

  // Sends one request; the returned slot is filled when the store answers.
  std::shared_ptr<std::optional<StoreReply>> Send(ClientId client, Op op, const ObjectId& id,
                                                  uint64_t size = 0) {
    capnp::MallocMessageBuilder message;
    auto env = message.initRoot<proto::Envelope>();
    proto::StoreRequest::Builder req = InitStoreRequest(env, op);
    req.setObjectId(DataOf(id));
    req.setSize(size);
    auto slot = std::make_shared<std::optional<StoreReply>>();
    auto owner = owners_.find(client);
    StoreCaller caller{.client = client,
                       .job = job_,
                       .local = true,
                       .owner = owner == owners_.end() ? 0 : owner->second};
    REQUIRE(store_->Handle(caller, env.asReader(), [slot](const StoreReply& r) { *slot = r; }).ok());
    return slot;
  }

  // Runs the loop until `done` or a 10 s deadline; returns `done()`.
  template <typename Pred>
  bool RunUntil(Pred done, std::chrono::milliseconds limit = std::chrono::milliseconds(10000)) {
    auto deadline = std::chrono::steady_clock::now() + limit;
    while (!done() && std::chrono::steady_clock::now() < deadline) {
      io_.run_one_for(std::chrono::milliseconds(5));
    }
    return done();
  }

  StoreReply Call(ClientId client, Op op, const ObjectId& id, uint64_t size = 0) {
    auto slot = Send(client, op, id, size);
    REQUIRE(RunUntil([&] { return slot->has_value(); }));
    return **slot;
  }

  // Creates, fills with Pattern(id) and seals an object; returns its id.
  ObjectId Put(ClientId client, uint64_t size) {
    ObjectId id = ObjectId::ForPut();
    StoreReply created = Call(client, Op::kCreate, id, size);
    REQUIRE(created.ok());
    Fill(id, created->offset, size);
    REQUIRE(Call(client, Op::kSeal, id).ok());
    return id;
  }
  void Fill(const ObjectId& id, uint64_t offset, uint64_t size) {
    uint8_t* out = store_->segment().writable_base() + offset;
    for (uint64_t i = 0; i < size; ++i) out[i] = Byte(id, i);
  }
  // Pins the object for `client` (restoring it if spilled) and checks its bytes.
  bool GetAndCheck(ClientId client, const ObjectId& id, uint64_t size) {
    StoreReply got = Call(client, Op::kGet, id);
    if (!got.ok() || got->size != size) return false;
    const uint8_t* in = store_->segment().readonly_base() + got->offset;
    for (uint64_t i = 0; i < size; ++i) {
      if (in[i] != Byte(id, i)) return false;
    }
    return true;
  }
  static uint8_t Byte(const ObjectId& id, uint64_t i) {
    return static_cast<uint8_t>(id.data()[i % 8] + i * 7 + (i >> 12));
  }
  size_t FilesInSpillDir() const {
    size_t n = 0;
    for (const auto& entry : fs::recursive_directory_iterator(dir_)) n += entry.is_regular_file();
    return n;
  }

 private:
  boost::asio::io_context io_;  // before store_: outlives it
  // Keeps run_one_for from stopping the loop when it runs out of handlers.
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_ =
      boost::asio::make_work_guard(io_);
  std::string dir_;
  JobId job_ = JobId::Random();
  std::map<ClientId, ClientId> owners_;  // client -> owner connection of what it creates
  std::unique_ptr<StoreServer> store_;
};

constexpr ClientId kDriver = 1;
constexpr ClientId kReader = 2;

TEST_CASE("a create that does not fit is parked until spilling makes room, and Get restores",
          "[store_server]") {
  // Invariant: no referenced object is lost; the parked create gets memory,
  // not an error, and every spilled object reads back byte-identical.
  Harness h(1024 * kKiB);
  (void)TaskEvents().Drain();  // only this case's events below
  std::vector<ObjectId> ids;
  for (int i = 0; i < 5; ++i) ids.push_back(h.Put(kDriver, 200 * kKiB));
  auto slot = h.Send(kDriver, Op::kCreate, ObjectId::ForPut(), 200 * kKiB);
  CHECK_FALSE(slot->has_value());  // parked, not failed
  REQUIRE(h.RunUntil([&] { return slot->has_value(); }));
  REQUIRE((*slot)->ok());
  SpillStats stats = h.store().GetSpillStats();
  CHECK(stats.spilled_objects >= 1);
  CHECK(stats.spill_files >= 1);
  CHECK(h.FilesInSpillDir() == stats.spill_files);
  // Several small objects go to one file.
  CHECK(stats.spill_files < stats.spilled_objects);
  for (const ObjectId& id : ids) {
    REQUIRE(h.GetAndCheck(kReader, id, 200 * kKiB));
    h.Send(kReader, Op::kRelease, id);  // no answer is due
  }
  // Each spill file and each restore is a task event with its bytes and time
  // (what `lumen timeline` draws on the node daemon's row).
  stats = h.store().GetSpillStats();
  uint64_t spill_events = 0, spilled_bytes = 0, restore_events = 0;
  for (const TaskEvent& e : TaskEvents().Drain()) {
    if (e.kind == TaskEventKind::kSpill) {
      ++spill_events;
      spilled_bytes += e.bytes;
      CHECK(e.duration_us >= 0);
    } else if (e.kind == TaskEventKind::kRestore) {
      ++restore_events;
      CHECK(e.bytes == 200 * kKiB);
    }
  }
  CHECK(spill_events == stats.spill_files);
  CHECK(spilled_bytes == stats.spilled_objects * 200 * kKiB);
  CHECK(restore_events == stats.restored_objects);
  CHECK(restore_events >= 1);
}

TEST_CASE("unreferenced objects and secondary copies go before any primary is spilled",
          "[store_server]") {
  Harness h(1024 * kKiB);
  // A secondary copy (pulled from another node).
  ObjectId pulled = ObjectId::ForPut();
  std::optional<absl::StatusOr<uint8_t*>> dest;
  h.store().BeginPullIn(pulled, 200 * kKiB, h.job(), [&](absl::StatusOr<uint8_t*> d) { dest = d; });
  REQUIRE(dest.has_value());
  REQUIRE(dest->ok());
  REQUIRE(h.store().SealPulledIn(pulled).ok());
  std::vector<ObjectId> ids;
  for (int i = 0; i < 4; ++i) ids.push_back(h.Put(kDriver, 200 * kKiB));
  // Two primaries lose their last reference: their memory is free at once.
  h.Send(kDriver, Op::kDelete, ids[0]);
  h.Send(kDriver, Op::kDelete, ids[1]);
  auto a = h.Send(kDriver, Op::kCreate, ObjectId::ForPut(), 200 * kKiB);
  auto b = h.Send(kDriver, Op::kCreate, ObjectId::ForPut(), 200 * kKiB);
  REQUIRE(a->has_value());  // answered without waiting
  REQUIRE(b->has_value());
  CHECK((*a)->ok());
  CHECK((*b)->ok());
  CHECK(h.store().GetSpillStats().evicted_secondary == 0);
  // The next one needs room: the secondary copy goes, nothing is spilled.
  auto c = h.Send(kDriver, Op::kCreate, ObjectId::ForPut(), 200 * kKiB);
  REQUIRE(c->has_value());
  CHECK((*c)->ok());
  SpillStats stats = h.store().GetSpillStats();
  CHECK(stats.evicted_secondary == 1);
  CHECK(stats.spilled_objects == 0);
  CHECK_FALSE(h.store().IsSealed(pulled));
  CHECK(h.FilesInSpillDir() == 0);  // no spill file was ever written
}

TEST_CASE("pinned objects are never spilled, and a client disconnect releases its pins",
          "[store_server]") {
  // Invariant: an object some client maps stays where it is, unchanged, however
  // full the store is; the create waiting for room fails only after the grace
  // period, with a message naming the sizes.
  Harness h(1024 * kKiB, std::chrono::milliseconds(300));
  std::vector<ObjectId> ids;
  for (int i = 0; i < 5; ++i) ids.push_back(h.Put(kDriver, 200 * kKiB));
  std::vector<uint64_t> offsets;
  for (const ObjectId& id : ids) {
    StoreReply got = h.Call(kReader, Op::kGet, id);
    REQUIRE(got.ok());
    offsets.push_back(got->offset);
  }
  CHECK(h.store().PinnedBytes() >= 5 * 200 * kKiB);
  auto start = std::chrono::steady_clock::now();
  StoreReply full = h.Call(kDriver, Op::kCreate, ObjectId::ForPut(), 200 * kKiB);
  CHECK(std::chrono::steady_clock::now() - start >= std::chrono::milliseconds(300));
  REQUIRE(full.status().code() == absl::StatusCode::kResourceExhausted);
  CHECK_THAT(std::string(full.status().message()),
             Catch::Contains("200.0 KiB") && Catch::Contains("pinned"));
  CHECK(h.store().GetSpillStats().spilled_objects == 0);
  for (size_t i = 0; i < ids.size(); ++i) {
    StoreReply again = h.Call(kDriver, Op::kGet, ids[i]);
    REQUIRE(again.ok());
    CHECK(again->offset == offsets[i]);
    REQUIRE(h.GetAndCheck(kDriver, ids[i], 200 * kKiB));
    h.Send(kDriver, Op::kRelease, ids[i]);
    h.Send(kDriver, Op::kRelease, ids[i]);
  }
  // The reader dies holding its pins: a parked create then gets room.
  auto parked = h.Send(kDriver, Op::kCreate, ObjectId::ForPut(), 200 * kKiB);
  CHECK_FALSE(parked->has_value());
  h.store().DisconnectClient(kReader);
  // What stays pinned is being written to disk (pinned by the store itself).
  CHECK(h.store().PinnedBytes() <= h.store().GetSpillStats().spilling_bytes);
  REQUIRE(h.RunUntil([&] { return parked->has_value(); }));
  CHECK((*parked)->ok());
  REQUIRE(h.store().TEST_CheckInvariants().ok());
}

TEST_CASE("a create larger than the whole store fails at once", "[store_server]") {
  Harness h(1024 * kKiB);
  auto slot = h.Send(kDriver, Op::kCreate, ObjectId::ForPut(), 2048 * kKiB);
  REQUIRE(slot->has_value());  // answered inside Handle, no waiting
  CHECK((*slot)->status().code() == absl::StatusCode::kResourceExhausted);
  CHECK_THAT(std::string((*slot)->status().message()),
             Catch::Contains("larger than the whole object store") && Catch::Contains("2.0 MiB"));
}

TEST_CASE("a store larger than the machine's memory fails at start naming the shortfall",
          "[store_server]") {
  boost::asio::io_context io;
  auto store = StoreServer::Create(StoreOptions{.bytes = 1ull << 50, .io = &io});  // 1 PiB
  REQUIRE_FALSE(store.ok());
  CHECK(store.status().code() == absl::StatusCode::kResourceExhausted);
  CHECK_THAT(std::string(store.status().message()),
             Catch::Contains("1.0 PiB") && Catch::Contains("short by"));
}

TEST_CASE("spill files go when their objects are freed and when the store stops",
          "[store_server]") {
  Harness h(1024 * kKiB);
  std::vector<ObjectId> ids;
  for (int i = 0; i < 15; ++i) ids.push_back(h.Put(kDriver, 200 * kKiB));
  SpillStats stats = h.store().GetSpillStats();
  REQUIRE(stats.on_disk_objects >= 10);
  REQUIRE(h.FilesInSpillDir() > 0);
  for (const ObjectId& id : ids) h.Send(kDriver, Op::kDelete, id);
  CHECK(h.store().GetSpillStats().on_disk_objects == 0);
  CHECK(h.RunUntil([&] { return h.FilesInSpillDir() == 0; }));  // removed in the background
  CHECK(h.store().GetStats().used == 0);

  for (int i = 0; i < 15; ++i) h.Put(kDriver, 200 * kKiB);
  REQUIRE(h.FilesInSpillDir() > 0);
  std::string spill_path = h.store().spill_path();
  REQUIRE(fs::exists(spill_path));
  h.store().Stop();
  CHECK_FALSE(fs::exists(spill_path));
}

TEST_CASE("a seeded random create/seal/get/release/delete/disconnect sequence keeps the invariants",
          "[store_server]") {
  // Invariants after every step: the allocator's free lists tile the segment
  // with used bytes, pins agree with the clients', and every sealed object
  // still referenced reads back with its own bytes (from memory or disk).
  uint64_t seed = std::random_device{}();
  if (const char* s = std::getenv("LUMEN_TEST_SEED")) seed = std::strtoull(s, nullptr, 10);
  INFO("seed " << seed << " (rerun with LUMEN_TEST_SEED=" << seed << ")");
  std::mt19937_64 rng(seed);
  Harness h(2048 * kKiB, std::chrono::milliseconds(200));
  struct Live {
    ObjectId id;
    uint64_t size;
    bool sealed;
    ClientId creator;
  };
  std::vector<Live> live;
  std::vector<std::pair<ClientId, ObjectId>> pins;
  for (int step = 0; step < 400; ++step) {
    INFO("step " << step);
    int op = static_cast<int>(rng() % 10);
    ClientId client = 1 + rng() % 3;
    if (op <= 3 || live.empty()) {
      uint64_t size = 1 + rng() % (op == 0 ? 700 * kKiB : 64 * kKiB);
      ObjectId id = ObjectId::ForPut();
      StoreReply created = h.Call(client, Op::kCreate, id, size);
      if (created.ok()) {
        h.Fill(id, created->offset, size);
        live.push_back({id, size, false, client});
      } else {
        REQUIRE(created.status().code() == absl::StatusCode::kResourceExhausted);
      }
    } else if (op == 4) {
      Live& l = live[rng() % live.size()];
      if (!l.sealed) {
        REQUIRE(h.Call(l.creator, Op::kSeal, l.id).ok());
        l.sealed = true;
      }
    } else if (op == 5) {
      Live& l = live[rng() % live.size()];
      if (l.sealed) {
        StoreReply got = h.Call(client, Op::kGet, l.id);
        if (got.ok()) {
          REQUIRE(h.GetAndCheck(client, l.id, l.size));  // a second pin
          pins.push_back({client, l.id});
          pins.push_back({client, l.id});
        }
      }
    } else if (op == 6 && !pins.empty()) {
      size_t i = rng() % pins.size();
      h.Send(pins[i].first, Op::kRelease, pins[i].second);
      pins.erase(pins.begin() + static_cast<long>(i));
    } else if (op == 7 || op == 8) {
      size_t i = rng() % live.size();
      if (live[i].sealed) {
        h.Send(kDriver, Op::kDelete, live[i].id);
        live.erase(live.begin() + static_cast<long>(i));
      }
    } else if (op == 9 && rng() % 8 == 0) {
      // A client dies: its pins go, its unsealed objects abort.
      h.store().DisconnectClient(client);
      std::erase_if(pins, [&](const auto& p) { return p.first == client; });
      std::erase_if(live, [&](const Live& l) { return !l.sealed && l.creator == client; });
    }
    REQUIRE(h.store().TEST_CheckInvariants().ok());
  }
  // Every referenced sealed object is intact, once the readers let go (with
  // everything pinned, a restore has nowhere to go).
  for (const auto& [client, id] : pins) h.Send(client, Op::kRelease, id);
  for (Live& l : live) {
    if (!l.sealed) REQUIRE(h.Call(l.creator, Op::kSeal, l.id).ok());
    l.sealed = true;
  }
  for (const Live& l : live) {
    REQUIRE(h.GetAndCheck(kDriver, l.id, l.size));
    h.Send(kDriver, Op::kRelease, l.id);
    REQUIRE(h.store().TEST_CheckInvariants().ok());
  }
  for (ClientId c = 1; c <= 3; ++c) h.store().DisconnectClient(c);
  for (const Live& l : live) h.Send(kDriver, Op::kDelete, l.id);
  REQUIRE(h.RunUntil([&] { return h.store().GetStats().used == 0; }));
  CHECK(h.store().GetSpillStats().on_disk_objects == 0);
  CHECK(h.RunUntil([&] { return h.FilesInSpillDir() == 0; }));  // removed in the background
  REQUIRE(h.store().TEST_CheckInvariants().ok());
}

}  // namespace
}  // namespace lumen::objectstore

namespace lumen::objectstore {
namespace {

TEST_CASE("LargestObjects lists the n largest, in memory or on disk only, with pins and state",
          "[store_server]") {
  // Invariant: `lumen memory`'s store rows are the n largest objects by size
  // (largest first), each with its pins, whether it is on disk, and its job;
  // a spilled object is listed as SPILLED although it left the table.
  Harness h(1024 * kKiB);
  ObjectId small = h.Put(kDriver, 10 * kKiB);
  ObjectId medium = h.Put(kDriver, 100 * kKiB);
  ObjectId large = h.Put(kDriver, 300 * kKiB);
  REQUIRE(h.Call(kReader, Op::kGet, medium).ok());  // pinned by the reader

  std::vector<StoreObjectInfo> top = h.store().LargestObjects(2);
  REQUIRE(top.size() == 2);
  CHECK(top[0].id == large);
  CHECK(top[0].size == 300 * kKiB);
  CHECK(std::string(top[0].state) == "SEALED");
  CHECK(top[0].pins == 0);
  CHECK(top[0].job == h.job());
  CHECK(top[1].id == medium);
  CHECK(top[1].pins == 1);
  CHECK(h.store().LargestObjects(10).size() == 3);
  CHECK(h.store().LargestObjects(0).empty());

  // Filling the store spills the unpinned ones; they stay listed, on disk.
  std::vector<ObjectId> more;
  for (int i = 0; i < 3; ++i) more.push_back(h.Put(kDriver, 250 * kKiB));
  REQUIRE(h.store().GetSpillStats().on_disk_objects >= 1);
  std::vector<StoreObjectInfo> all = h.store().LargestObjects(100);
  CHECK(all.size() == 6);
  size_t spilled = 0;
  for (size_t i = 0; i < all.size(); ++i) {
    if (i > 0) CHECK(all[i - 1].size >= all[i].size);
    if (std::string(all[i].state) == "SPILLED") {
      ++spilled;
      CHECK(all[i].on_disk);
      CHECK(all[i].id != medium);  // pinned: never spilled
    }
  }
  CHECK(spilled >= 1);
  (void)small;
}

TEST_CASE("sealed means immutable at the store API: create-twice, seal-twice, abort-after-seal "
          "are typed errors",
          "[store_server][chaos]") {
  // Invariant: a request that would change an object that exists or is sealed
  // is refused with its own status code (AlreadyExists, FailedPrecondition,
  // NotFound), the object's bytes and state are unchanged, and the store's
  // invariants hold after each refusal.
  Harness h(1024 * kKiB);
  const uint64_t size = 100 * kKiB;
  ObjectId id = h.Put(kDriver, size);
  const uint64_t used_before = h.store().GetStats().used;
  const uint64_t objects_before = h.store().GetStats().num_objects;

  StoreReply again = h.Call(kDriver, Op::kCreate, id, size);
  CHECK(again.status().code() == absl::StatusCode::kAlreadyExists);
  StoreReply other_creator = h.Call(kReader, Op::kCreate, id, size);
  CHECK(other_creator.status().code() == absl::StatusCode::kAlreadyExists);
  StoreReply reseal = h.Call(kDriver, Op::kSeal, id);
  CHECK(reseal.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK_THAT(std::string(reseal.status().message()), Catch::Contains("already sealed"));
  StoreReply abort = h.Call(kDriver, Op::kAbort, id);
  CHECK(abort.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK_THAT(std::string(abort.status().message()), Catch::Contains("sealed and cannot be aborted"));
  CHECK(h.Call(kReader, Op::kAbort, id).status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(h.Call(kDriver, Op::kSeal, ObjectId::ForPut()).status().code() ==
        absl::StatusCode::kNotFound);
  CHECK(h.Call(kDriver, Op::kAbort, ObjectId::ForPut()).status().code() ==
        absl::StatusCode::kNotFound);
  REQUIRE(h.store().TEST_CheckInvariants().ok());
  CHECK(h.store().GetStats().used == used_before);
  CHECK(h.store().GetStats().num_objects == objects_before);
  CHECK(h.store().IsSealed(id));
  CHECK(h.GetAndCheck(kReader, id, size));

  // An unsealed object: only its creator seals or aborts it, once.
  ObjectId unsealed = ObjectId::ForPut();
  REQUIRE(h.Call(kDriver, Op::kCreate, unsealed, size).ok());
  CHECK(h.Call(kReader, Op::kSeal, unsealed).status().code() ==
        absl::StatusCode::kFailedPrecondition);
  CHECK(h.Call(kDriver, Op::kGet, unsealed).status().code() == absl::StatusCode::kUnavailable);
  REQUIRE(h.Call(kDriver, Op::kAbort, unsealed).ok());
  CHECK(h.Call(kDriver, Op::kAbort, unsealed).status().code() == absl::StatusCode::kNotFound);
  CHECK(h.Call(kDriver, Op::kSeal, unsealed).status().code() == absl::StatusCode::kNotFound);
  REQUIRE(h.store().TEST_CheckInvariants().ok());
}

TEST_CASE("the store's pages are reserved up front by default", "[store_server][chaos]") {
  // Invariant: with default options the whole segment becomes backed by
  // memory (fallocate) without any object being created, so no write into it
  // can SIGBUS later; LUMEN_OBJECT_STORE_RESERVE=0 keeps the per-object mode.
  Harness h(8 * 1024 * kKiB);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (h.store().ReservedBytes() < h.store().segment().size() &&
         std::chrono::steady_clock::now() < deadline) {
    h.RunUntil([] { return false; }, std::chrono::milliseconds(5));
  }
  CHECK(h.store().ReservedBytes() == h.store().segment().size());
  struct stat st;
  REQUIRE(fstat(h.store().segment().fd(), &st) == 0);
  CHECK(static_cast<uint64_t>(st.st_blocks) * 512 >= h.store().segment().size());

  boost::asio::io_context io;
  ::setenv("LUMEN_OBJECT_STORE_RESERVE", "0", 1);
  StoreOptions lazy = StoreOptions::FromEnv(8 * 1024 * kKiB, "", &io);
  ::setenv("LUMEN_OBJECT_STORE_RESERVE", "start", 1);
  StoreOptions at_start = StoreOptions::FromEnv(8 * 1024 * kKiB, "", &io);
  ::unsetenv("LUMEN_OBJECT_STORE_RESERVE");
  StoreOptions by_default = StoreOptions::FromEnv(8 * 1024 * kKiB, "", &io);
  CHECK(lazy.reserve == StoreOptions::Reserve::kPerObject);
  CHECK(at_start.reserve == StoreOptions::Reserve::kAtStart);
  CHECK(by_default.reserve == StoreOptions::Reserve::kBackground);
  auto store = StoreServer::Create(std::move(lazy));
  REQUIRE(store.ok());
  CHECK((*store)->ReservedBytes() == 0);
  REQUIRE(fstat((*store)->segment().fd(), &st) == 0);
  CHECK(st.st_blocks == 0);
}

TEST_CASE("the background reservation starts only after its delay", "[store_server]") {
  // Invariant: with reserve_delay the reserving thread starts that long after
  // Create, not before (a node's start and a driver's Init run first), and
  // then reserves the whole segment; FromEnv's delay is kDefaultReserveDelay
  // unless LUMEN_OBJECT_STORE_RESERVE_DELAY_MS says otherwise.
  boost::asio::io_context io;
  const uint64_t bytes = 8 * 1024 * kKiB;
  auto later = StoreServer::Create(
      StoreOptions{.bytes = bytes, .io = &io, .reserve_delay = std::chrono::seconds(60)});
  REQUIRE(later.ok());
  const auto start = std::chrono::steady_clock::now();
  auto soon = StoreServer::Create(
      StoreOptions{.bytes = bytes, .io = &io, .reserve_delay = std::chrono::milliseconds(100)});
  REQUIRE(soon.ok());
  auto deadline = start + std::chrono::seconds(10);
  while ((*soon)->ReservedBytes() < bytes && std::chrono::steady_clock::now() < deadline) {
    io.run_for(std::chrono::milliseconds(5));
  }
  CHECK((*soon)->ReservedBytes() == bytes);
  CHECK(std::chrono::steady_clock::now() - start >= std::chrono::milliseconds(100));
  // The other one's delay has not passed: nothing of it is reserved.
  CHECK((*later)->ReservedBytes() == 0);
  struct stat st;
  REQUIRE(fstat((*later)->segment().fd(), &st) == 0);
  CHECK(st.st_blocks == 0);
  later->reset();  // stops before its timer fires: the timer's wait ends with it

  ::unsetenv("LUMEN_OBJECT_STORE_RESERVE_DELAY_MS");
  CHECK(StoreOptions::FromEnv(bytes, "", &io).reserve_delay == kDefaultReserveDelay);
  ::setenv("LUMEN_OBJECT_STORE_RESERVE_DELAY_MS", "0", 1);
  CHECK(StoreOptions::FromEnv(bytes, "", &io).reserve_delay == std::chrono::milliseconds(0));
  ::unsetenv("LUMEN_OBJECT_STORE_RESERVE_DELAY_MS");
  io.run_for(std::chrono::milliseconds(5));  // the cancelled wait completes harmlessly
}

}  // namespace
}  // namespace lumen::objectstore

namespace lumen::objectstore {
namespace {

TEST_CASE("a store four times the size of a 16 MiB /dev/shm starts and every byte of it is writable",
          "[store_server][chaos]") {
  // Invariant: /dev/shm's size does not bound the store (its segment is a
  // memfd, whose pages come from memory): in a mount namespace whose /dev/shm
  // is a 16 MiB tmpfs (Docker's small --shm-size), a 64 MiB store starts with
  // all of its pages reserved and every byte of it can be written (no
  // SIGBUS). Skipped where mount namespaces cannot be made (not root).
  pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    if (::unshare(CLONE_NEWNS) != 0 || ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
        ::mount("tmpfs", "/dev/shm", "tmpfs", 0, "size=16m") != 0) {
      ::_exit(77);
    }
    struct statvfs vfs;
    if (::statvfs("/dev/shm", &vfs) != 0 || uint64_t(vfs.f_blocks) * vfs.f_frsize > (16u << 20)) {
      ::_exit(4);
    }
    boost::asio::io_context io;
    StoreOptions options{.bytes = 64u << 20, .io = &io};
    options.reserve = StoreOptions::Reserve::kAtStart;
    auto store = StoreServer::Create(std::move(options));
    if (!store.ok()) ::_exit(5);
    std::memset((*store)->segment().writable_base(), 0x5a, 64u << 20);
    ::_exit((*store)->segment().readonly_base()[(64u << 20) - 1] == 0x5a ? 0 : 6);
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  INFO("child status " << status);
  REQUIRE(WIFEXITED(status));  // not killed by SIGBUS
  if (WEXITSTATUS(status) == 77) {
    WARN("skipped: cannot make a mount namespace with a small /dev/shm here");
    return;
  }
  CHECK(WEXITSTATUS(status) == 0);
}

}  // namespace
}  // namespace lumen::objectstore

namespace lumen::objectstore {
namespace {

TEST_CASE("OwnerGone deletes exactly that owner's objects and visits only them",
          "[store_server]") {
  // Invariant: when an owner's connection closes, every primary copy it owns
  // goes (a pinned one when its reader releases it, a spilled one with its
  // file) and nothing of another owner does; the work is O(that owner's
  // objects) however many objects other owners hold (the owner index).
  Harness h(4096 * kKiB);
  constexpr ClientId kOwnerA = 11;
  constexpr ClientId kOwnerB = 12;
  constexpr ClientId kClientA = 21;
  constexpr ClientId kClientB = 22;
  h.SetOwner(kClientA, kOwnerA);
  h.SetOwner(kClientB, kOwnerB);
  // One large object of A at the bottom of the segment (spilled first when
  // the store fills), many small objects of B, a few more of A.
  ObjectId spilled = h.Put(kClientA, 1024 * kKiB);
  std::vector<ObjectId> of_b;
  for (int i = 0; i < 3000; ++i) of_b.push_back(h.Put(kClientB, 64));
  std::vector<ObjectId> of_a;
  for (int i = 0; i < 5; ++i) of_a.push_back(h.Put(kClientA, 600 * kKiB));
  std::vector<StoreObjectInfo> largest = h.store().LargestObjects(1);
  REQUIRE(largest.size() == 1);
  REQUIRE(largest[0].id == spilled);
  REQUIRE(largest[0].on_disk);
  // A reader pins one of A's objects across the owner's exit.
  REQUIRE(h.GetAndCheck(kReader, of_a[0], 600 * kKiB));
  REQUIRE(h.store().TEST_records().num_owners() == 2);

  const uint64_t visited_before = h.store().TEST_records().TEST_visited();
  h.store().OwnerGone(kOwnerA);
  CHECK(h.store().TEST_records().TEST_visited() - visited_before == of_a.size() + 1);
  CHECK(h.store().TEST_records().num_owners() == 1);
  CHECK(h.store().TEST_records().size() == of_b.size());

  // A's objects are gone (the spilled one from disk too); B's all read back.
  for (const ObjectId& id : of_a) CHECK(h.Call(kReader, Op::kGet, id).status().code() ==
                                        absl::StatusCode::kNotFound);
  CHECK(h.Call(kReader, Op::kGet, spilled).status().code() == absl::StatusCode::kNotFound);
  for (const ObjectId& id : of_b) {
    REQUIRE(h.GetAndCheck(kReader, id, 64));
    h.Send(kReader, Op::kRelease, id);
  }
  // The pinned one is delete-pending: its memory goes with the reader's pin.
  CHECK(h.store().IsSealed(of_a[0]) == false);
  const uint64_t used_pinned = h.store().GetStats().used;
  h.Send(kReader, Op::kRelease, of_a[0]);
  CHECK(h.store().GetStats().used < used_pinned);
  REQUIRE(h.store().TEST_CheckInvariants().ok());

  // An owner with nothing in the store visits nothing; owner 0 (unknown)
  // never deletes anything.
  const uint64_t visited_after = h.store().TEST_records().TEST_visited();
  h.store().OwnerGone(kOwnerA);
  h.store().OwnerGone(0);
  CHECK(h.store().TEST_records().TEST_visited() == visited_after);
  CHECK(h.store().TEST_records().size() == of_b.size());
}

}  // namespace
}  // namespace lumen::objectstore

namespace lumen::objectstore {
namespace {

TEST_CASE("a create waiting for room is answered while the next spill write is in flight",
          "[store_server]") {
  // Invariant: the store spills ahead of need, in more than one write, so
  // the SpillWorker already has the next write when the first one frees
  // room: a driver putting in a loop overlaps with the writes instead of
  // waiting for each (doc/benchmark.md, "Spilling against the disk limit").
  Harness h(1024 * kKiB);
  std::vector<ObjectId> ids;
  std::shared_ptr<std::optional<StoreReply>> parked;
  const ObjectId waiting = ObjectId::ForPut();
  for (;;) {
    ObjectId id = ids.size() < 2000 ? ObjectId::ForPut() : waiting;
    auto slot = h.Send(kDriver, Op::kCreate, id, kKiB);
    if (!slot->has_value()) {
      REQUIRE(id != waiting);
      parked = slot;
      break;
    }
    REQUIRE((*slot)->ok());
    h.Fill(id, (**slot)->offset, kKiB);
    REQUIRE(h.Call(kDriver, Op::kSeal, id).ok());
    ids.push_back(id);
  }
  // Parked: more than it needs is being written, a quarter of the store ahead.
  SpillStats at_park = h.store().GetSpillStats();
  CHECK(at_park.parked_creates == 1);
  CHECK(at_park.spilling_bytes >= kKiB + 256 * kKiB);
  // 257+ objects of 1 KiB: more than one file (at most 256 objects a file).
  REQUIRE(h.RunUntil([&] { return parked->has_value(); }));
  REQUIRE((*parked)->ok());
  // Answered on the first write's completion, the second still in flight.
  SpillStats at_answer = h.store().GetSpillStats();
  CHECK(at_answer.spilling_bytes > 0);
  CHECK(at_answer.spilled_objects > 0);
  CHECK(at_answer.spilled_objects < at_park.spilling_bytes / kKiB);
  REQUIRE(h.RunUntil([&] { return h.store().GetSpillStats().spilling_bytes == 0; }));
  CHECK(h.store().GetSpillStats().spill_files >= 2);
  for (const ObjectId& id : ids) {
    REQUIRE(h.GetAndCheck(kReader, id, kKiB));
    h.Send(kReader, Op::kRelease, id);
  }
  REQUIRE(h.store().TEST_CheckInvariants().ok());
}

}  // namespace
}  // namespace lumen::objectstore
