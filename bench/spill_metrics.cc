#include "bench/spill_metrics.h"

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <capnp/message.h>

#include "bench/check.h"
#include "bench/object_metrics.h"
#include "lumen/common/ids.h"
#include "lumen/common/proto_util.h"
#include "lumen/objectstore/store_server.h"
#include "absl/container/flat_hash_set.h"

namespace lumen::bench {
namespace {

namespace fs = std::filesystem;
using objectstore::StoreReply;
using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

// A store in this process, its loop run by the calls below.
class LocalStore {
 public:
  LocalStore(uint64_t bytes, const std::string& dir) {
    auto store = objectstore::StoreServer::Create(objectstore::StoreOptions{
        .bytes = bytes, .spill_dir = dir, .full_grace = std::chrono::seconds(60), .io = &io_});
    Check(store.ok(), "cannot create a store: " + std::string(store.status().message()));
    store_ = std::move(*store);
  }
  objectstore::StoreServer& store() { return *store_; }

  // Sends a request (0 create, 1 seal, 2 get, 3 release, 4 delete) and runs
  // the loop until it is answered.
  StoreReply Call(int op, const ObjectId& id, uint64_t size) {
    std::optional<StoreReply> reply = Send(op, id, size, /*answered=*/true);
    return reply.value_or(objectstore::StoreRegion{});
  }
  // A request that has no answer (3 release, 4 delete).
  void Tell(int op, const ObjectId& id) { Send(op, id, 0, /*answered=*/false); }

  // Sends a request and, when one is due, runs the loop until it is answered.
  std::optional<StoreReply> Send(int op, const ObjectId& id, uint64_t size, bool answered) {
    capnp::MallocMessageBuilder message;
    auto env = message.initRoot<proto::Envelope>();
    auto req = op == 0   ? env.initStoreCreate()
               : op == 1 ? env.initStoreSeal()
               : op == 2 ? env.initStoreGet()
               : op == 3 ? env.initStoreRelease()
                         : env.initStoreDelete();
    req.setObjectId(DataOf(id));
    req.setSize(size);
    std::optional<StoreReply> reply;
    objectstore::StoreCaller caller{.client = 1, .job = job_, .local = true};
    Check(store_->Handle(caller, env.asReader(), [&](const StoreReply& r) { reply = r; }).ok(),
          "the store refused a request");
    while (answered && !reply) io_.run_one_for(std::chrono::milliseconds(10));
    return reply;
  }

  // Runs the loop until no spill write is in flight.
  void DrainSpills() {
    while (store_->GetSpillStats().spilling_bytes > 0) {
      io_.run_one_for(std::chrono::milliseconds(10));
    }
  }

 private:
  boost::asio::io_context io_;  // outlives store_
  // Keeps run_one_for from stopping the loop when it runs out of handlers.
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_ =
      boost::asio::make_work_guard(io_);
  JobId job_ = JobId::Random();
  std::unique_ptr<objectstore::StoreServer> store_;
};

// What a round measures (GB/s; 0 where the round does not measure it).
struct Round {
  bool spill = false;  // a spill round; else a plain-write (limit) round
  double write = 0;    // spill_gigabytes / disk_write_gigabytes
  double read = 0;     // restore_gigabytes / disk_read_gigabytes
  double write_just_freed = 0;  // limit rounds: disk_write_just_freed_gigabytes
  double settled_seconds = 0;   // waited before the round (SettleFreedMemory)
  double settled_mib = 0;       // handed back meanwhile
};

// Waits until the guest has handed most of the memory freed before it back
// to its host, so that each round's writes go into memory the machine must
// newly give to the page cache, as a spill's do in a node that has run a
// while (a spill grows the page cache by what it writes while every object
// stays referenced). Only a VM with free page reporting (virtio-balloon)
// does that, and there the first write to such a page costs a host fault: a
// write into memory freed a moment before (which the kernel hands out first)
// runs several times faster than one into memory handed back
// (doc/benchmark.md, "Spilling against the disk limit"). The kernel reports
// in passes about 2 s apart, a part of the free memory each; this waits
// until its running count of reported bytes has grown by half of `freed`, or
// has not grown for 4.5 s (two passes), or `max` passed. Returns the seconds
// waited and the MiB reported meanwhile; {0, 0} without free page reporting.
std::pair<double, double> SettleFreedMemory(uint64_t freed, std::chrono::milliseconds max) {
  auto reported_kib = []() -> std::optional<uint64_t> {
    FILE* f = std::fopen("/sys/module/page_reporting/parameters/reported_kib", "r");
    if (f == nullptr) return std::nullopt;
    unsigned long long kib = 0;
    bool ok = std::fscanf(f, "%llu", &kib) == 1;
    std::fclose(f);
    return ok ? std::optional<uint64_t>(kib) : std::nullopt;
  };
  const std::optional<uint64_t> first = reported_kib();
  if (!first) return {0, 0};
  const auto start = Clock::now();
  auto grown_at = start;
  uint64_t last = *first;
  while (Clock::now() - start < max && Clock::now() - grown_at < std::chrono::milliseconds(4500) &&
         (last - *first) * 1024 < freed / 2) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const uint64_t now = reported_kib().value_or(last);
    if (now != last) grown_at = Clock::now();
    last = now;
  }
  return {Seconds(start), static_cast<double>(last - *first) / 1024};
}

// Puts one object of `bytes` filled with `ids.size() & 0xff` (waiting while
// the store spills when it is full); returns its offset in the segment.
uint64_t PutObject(LocalStore& local, std::vector<ObjectId>& ids, uint64_t bytes) {
  ObjectId id = ObjectId::ForPut();
  StoreReply created = local.Call(0, id, bytes);
  Check(created.ok(), "a create failed: " + std::string(created.status().message()));
  std::memset(local.store().segment().writable_base() + created->offset,
              static_cast<int>(ids.size() & 0xff), bytes);
  Check(local.Call(1, id, 0).ok(), "a seal failed");
  ids.push_back(id);
  return created->offset;
}

// A spill round: a fresh store takes 4x its size in objects, each create
// beyond the first store-full waiting while the store spills; then every
// spilled object is read back (Get), oldest first. The clock of the spill
// starts once the store is full, so the first touch of its fresh pages is
// not counted against the disk. Before the reads (untimed), the writes the
// store started ahead of need finish, and the objects it still holds only in
// memory are deleted: each restore then makes room by dropping an object
// restored before (its disk copy stays), so the clock of the restores counts
// restoring alone, as the plain read it is compared with does; writing
// objects out is what spill_gigabytes measures.
Round SpillRound(const std::string& dir, uint64_t store_bytes, uint64_t object_bytes) {
  Round round{.spill = true};
  LocalStore local(store_bytes, dir);
  std::vector<ObjectId> ids;
  for (uint64_t done = 0; done < store_bytes; done += object_bytes) {
    PutObject(local, ids, object_bytes);
  }
  auto start = Clock::now();
  const uint64_t spilled_before = local.store().GetSpillStats().spilled_bytes;
  for (uint64_t done = store_bytes; done < 4 * store_bytes; done += object_bytes) {
    PutObject(local, ids, object_bytes);
  }
  double seconds = Seconds(start);
  const uint64_t spilled = local.store().GetSpillStats().spilled_bytes;
  Check(spilled >= 3 * store_bytes, "the store spilled less than it had to");
  round.write = static_cast<double>(spilled - spilled_before) / kRayGigabyte / seconds;

  local.DrainSpills();
  absl::flat_hash_set<ObjectId> in_memory_only;
  for (const objectstore::StoreObjectInfo& info : local.store().LargestObjects(ids.size())) {
    if (!info.on_disk) in_memory_only.insert(info.id);
  }
  for (const ObjectId& id : in_memory_only) local.Tell(4, id);
  start = Clock::now();
  for (const ObjectId& id : ids) {
    if (in_memory_only.contains(id)) continue;
    StoreReply got = local.Call(2, id, 0);
    Check(got.ok(), "a get failed: " + std::string(got.status().message()));
    Check(local.store().segment().readonly_base()[got->offset + object_bytes - 1] ==
              static_cast<uint8_t>(&id - ids.data()),
          "a restored object has the wrong bytes");
    local.Tell(3, id);
  }
  seconds = Seconds(start);
  const objectstore::SpillStats stats = local.store().GetSpillStats();
  Check(stats.restored_objects == ids.size() - in_memory_only.size(),
        "not every spilled object was restored once");
  Check(stats.spilling_bytes == 0, "the store wrote objects while restoring");
  round.read = static_cast<double>(stats.restored_bytes) / kRayGigabyte / seconds;
  return round;  // the store's destructor removes its spill files
}

// Writes `bytes` to a new file `path` in object-sized chunks taken in turn
// from `chunks` (offsets into `base`), or reads the file back into them;
// returns GB/s. No fsync (spill files are never synced, doc/objectstore.md).
double PlainIo(bool write, const std::string& path, uint8_t* base,
               const std::vector<uint64_t>& chunks, uint64_t chunk, uint64_t bytes) {
  const auto start = Clock::now();
  int fd = write ? ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600)
                 : ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  Check(fd >= 0, "cannot open " + path);
  uint64_t n = 0;
  for (uint64_t done = 0; done < bytes; done += chunk, ++n) {
    uint8_t* at = base + chunks[n % chunks.size()];
    ssize_t got = write ? ::write(fd, at, chunk) : ::read(fd, at, chunk);
    Check(got == static_cast<ssize_t>(chunk), write ? "short write" : "short read");
  }
  ::close(fd);
  return static_cast<double>(bytes) / kRayGigabyte / Seconds(start);
}

// A limit round: the same fresh store filled the same way as a spill round's
// (untimed), then a plain file write, in the same directory, of the bytes a
// spill round must write (3x the store), in object-sized chunks straight from
// the store's objects in turn (memory this process has mapped and written,
// the best case for a write), and the read of that file back into them.
// Then the file is deleted and the same write done again at once, into the
// page cache just freed: disk_write_just_freed_gigabytes.
Round LimitRound(const std::string& dir, uint64_t store_bytes, uint64_t object_bytes) {
  Round round;
  LocalStore local(store_bytes, dir);
  std::vector<ObjectId> ids;
  std::vector<uint64_t> offsets;
  for (uint64_t done = 0; done < store_bytes; done += object_bytes) {
    offsets.push_back(PutObject(local, ids, object_bytes));
  }
  uint8_t* base = local.store().segment().writable_base();
  const std::string path = dir + "/disk-limit";
  const uint64_t bytes = 3 * store_bytes;
  round.write = PlainIo(true, path, base, offsets, object_bytes, bytes);
  round.read = PlainIo(false, path, base, offsets, object_bytes, bytes);
  ::unlink(path.c_str());
  round.write_just_freed = PlainIo(true, path, base, offsets, object_bytes, bytes);
  ::unlink(path.c_str());
  return round;
}

}  // namespace

void RunSpillMetrics(Reporter& out, bool quick) {
  const std::vector<std::string> names = {"spill_gigabytes", "restore_gigabytes",
                                          "disk_write_gigabytes", "disk_read_gigabytes",
                                          "disk_write_just_freed_gigabytes"};
  if (std::none_of(names.begin(), names.end(), [&](const std::string& n) { return out.Wants(n); })) {
    return;
  }
  const uint64_t store_bytes = (quick ? 64ull : 512ull) << 20;
  const uint64_t object_bytes = (quick ? 4ull : 32ull) << 20;
  const auto settle_max = quick ? std::chrono::milliseconds(3000) : std::chrono::milliseconds(12000);
  std::string dir = (fs::temp_directory_path() / "lumen-spill-bench-XXXXXX").string();
  if (::mkdtemp(dir.data()) == nullptr) {
    out.Fail("spill_gigabytes", "cannot create a directory under " +
                                    fs::temp_directory_path().string());
    return;
  }
  // Spill and limit rounds in the order limit, spill, spill, limit (so a
  // drift of the machine during the run favours neither), each under the
  // same conditions: after much of the memory the previous round freed (its
  // store and its files, 4x the store) was handed back (before the first:
  // until nothing more is), a fresh store filled
  // the same way, then the timed writes.
  std::vector<Round> rounds;
  out.Setup("spill_gigabytes", [&] {
    for (bool spill : {false, true, true, false}) {
      const std::pair<double, double> settled =
          SettleFreedMemory(rounds.empty() ? UINT64_MAX : 4 * store_bytes, settle_max);
      rounds.push_back(spill ? SpillRound(dir, store_bytes, object_bytes)
                             : LimitRound(dir, store_bytes, object_bytes));
      rounds.back().settled_seconds = settled.first;
      rounds.back().settled_mib = settled.second;
    }
  });
  std::error_code ignored;
  fs::remove_all(dir, ignored);
  if (rounds.size() != 4) return;
  auto mean = [&](bool spill, double Round::*field) {
    double sum = 0;
    int n = 0;
    for (const Round& r : rounds) {
      if (r.spill == spill) sum += r.*field, ++n;
    }
    return sum / n;
  };
  out.Value("spill_gigabytes", "GB/s", [&] { return mean(true, &Round::write); });
  out.Value("restore_gigabytes", "GB/s", [&] { return mean(true, &Round::read); });
  out.Value("disk_write_gigabytes", "GB/s", [&] { return mean(false, &Round::write); });
  out.Value("disk_read_gigabytes", "GB/s", [&] { return mean(false, &Round::read); });
  out.Value("disk_write_just_freed_gigabytes", "GB/s",
            [&] { return mean(false, &Round::write_just_freed); });
  std::string rounds_line =
      "spill rounds, GB/s write/read (waited, MiB handed back before the round):";
  for (const Round& r : rounds) {
    char part[120];
    std::snprintf(part, sizeof(part), " %s %.3f/%.3f (%.1f s, %.0f MiB)",
                  r.spill ? "spill" : "limit", r.write, r.read, r.settled_seconds, r.settled_mib);
    rounds_line += part;
  }
  out.Note(rounds_line);
}

}  // namespace lumen::bench
