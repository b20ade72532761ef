#include "bench/spill_metrics.h"

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <capnp/message.h>

#include "bench/check.h"
#include "bench/object_metrics.h"
#include "lumen/common/ids.h"
#include "lumen/common/proto_util.h"
#include "lumen/objectstore/store_server.h"

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

  // Sends a request and runs the loop until it is answered (if one is due).
  StoreReply Call(int op, const ObjectId& id, uint64_t size, bool answered = true) {
    capnp::MallocMessageBuilder message;
    auto env = message.initRoot<proto::Envelope>();
    auto req = op == 0   ? env.initStoreCreate()
               : op == 1 ? env.initStoreSeal()
               : op == 2 ? env.initStoreGet()
                         : env.initStoreRelease();
    req.setObjectId(DataOf(id));
    req.setSize(size);
    std::optional<StoreReply> reply;
    objectstore::StoreCaller caller{.client = 1, .job = job_, .local = true};
    Check(store_->Handle(caller, env.asReader(), [&](const StoreReply& r) { reply = r; }).ok(),
          "the store refused a request");
    while (answered && !reply) io_.run_one_for(std::chrono::milliseconds(10));
    return reply.value_or(StoreReply{});
  }

 private:
  boost::asio::io_context io_;  // outlives store_
  // Keeps run_one_for from stopping the loop when it runs out of handlers.
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_ =
      boost::asio::make_work_guard(io_);
  JobId job_ = JobId::Random();
  std::unique_ptr<objectstore::StoreServer> store_;
};

// Writes (then reads) `bytes` in `chunk`-sized writes to a file in `dir`;
// returns GB/s of each. The writes come from `source` in turn, chunk after
// chunk, as the spill's come from the whole store: a single chunk-sized
// buffer written again and again stays in the CPU's cache and makes the
// limit look higher than any copy of fresh data can be.
std::pair<double, double> DiskLimit(const std::string& dir, uint64_t bytes, uint64_t chunk,
                                    std::vector<uint8_t>& source) {
  std::string path = dir + "/disk-limit";
  const uint64_t chunks = std::max<uint64_t>(source.size() / chunk, 1);
  auto start = Clock::now();
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  Check(fd >= 0, "cannot create " + path);
  uint64_t n = 0;
  for (uint64_t done = 0; done < bytes; done += chunk, ++n) {
    const uint8_t* from = source.data() + (n % chunks) * chunk;
    Check(::write(fd, from, chunk) == static_cast<ssize_t>(chunk), "short write");
  }
  ::close(fd);
  double write = static_cast<double>(bytes) / kRayGigabyte / Seconds(start);
  start = Clock::now();
  fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  Check(fd >= 0, "cannot open " + path);
  for (uint64_t done = 0; done < bytes; done += chunk) {
    uint8_t* into = source.data() + (done / chunk % chunks) * chunk;
    Check(::read(fd, into, chunk) == static_cast<ssize_t>(chunk), "short read");
  }
  ::close(fd);
  double read = static_cast<double>(bytes) / kRayGigabyte / Seconds(start);
  ::unlink(path.c_str());
  return {write, read};
}

}  // namespace

void RunSpillMetrics(Reporter& out, bool quick) {
  const uint64_t store_bytes = (quick ? 64ull : 512ull) << 20;
  const uint64_t object_bytes = (quick ? 4ull : 32ull) << 20;
  const uint64_t total = 4 * store_bytes;  // 3/4 of it must go to disk
  std::string dir = (fs::temp_directory_path() / "lumen-spill-bench-XXXXXX").string();
  if (::mkdtemp(dir.data()) == nullptr) {
    out.Fail("spill_gigabytes", "cannot create a directory under " +
                                    fs::temp_directory_path().string());
    return;
  }
  uint64_t spilled = 0;
  out.Step("spill_gigabytes", [&] {
    LocalStore local(store_bytes, dir);
    std::vector<ObjectId> ids;
    // Puts 4x the store: each create beyond the first store-full waits for
    // spilling. The clock starts once the store is full, so the first touch of
    // its fresh pages is not counted against the disk.
    auto start = Clock::now();
    uint64_t spilled_before = 0;
    for (uint64_t done = 0; done < total; done += object_bytes) {
      if (done == store_bytes) {
        start = Clock::now();
        spilled_before = local.store().GetSpillStats().spilled_bytes;
      }
      ObjectId id = ObjectId::ForPut();
      StoreReply created = local.Call(0, id, object_bytes);
      Check(created.status.ok(), "a create failed: " + std::string(created.status.message()));
      std::memset(local.store().segment().writable_base() + created.offset,
                  static_cast<int>(ids.size() & 0xff), object_bytes);
      Check(local.Call(1, id, 0).status.ok(), "a seal failed");
      ids.push_back(id);
    }
    double seconds = Seconds(start);
    spilled = local.store().GetSpillStats().spilled_bytes;
    Check(spilled >= total - store_bytes, "the store spilled less than it had to");
    out.Value("spill_gigabytes", "GB/s", [&] {
      return static_cast<double>(spilled - spilled_before) / kRayGigabyte / seconds;
    });
    // Reads every object back, oldest (spilled) first.
    start = Clock::now();
    for (const ObjectId& id : ids) {
      StoreReply got = local.Call(2, id, 0);
      Check(got.status.ok(), "a get failed: " + std::string(got.status.message()));
      Check(local.store().segment().readonly_base()[got.offset + object_bytes - 1] ==
                static_cast<uint8_t>(&id - ids.data()),
            "a restored object has the wrong bytes");
      local.Call(3, id, 0, /*answered=*/false);
    }
    seconds = Seconds(start);
    uint64_t restored = local.store().GetSpillStats().restored_bytes;
    out.Value("restore_gigabytes", "GB/s",
              [&] { return static_cast<double>(restored) / kRayGigabyte / seconds; });
    // The same plain write as disk_write_gigabytes below, but while the spill
    // files still hold their page cache, as they did while the store spilled:
    // every page this write fills is memory the machine had not just freed.
    // disk_write_gigabytes runs after the store and its files are gone and
    // refills the pages they held; on a VM that hands freed memory back to
    // its host (free page reporting) memory it had not just freed costs a
    // host fault per page, and that write is several times faster than this
    // one (doc/benchmark.md, "Object store").
    out.Value("disk_write_fresh_gigabytes", "GB/s", [&] {
      std::vector<uint8_t> source(store_bytes);
      for (size_t i = 0; i < source.size(); i += 4096) source[i] = static_cast<uint8_t>(i >> 12);
      return DiskLimit(dir, spilled / object_bytes * object_bytes, object_bytes, source).first;
    });
  });
  if (spilled > 0) {
    out.Step("disk_write_gigabytes", [&] {
      // A pair, not a structured binding: clang 14 (scripts/lint) cannot
      // capture structured bindings in a lambda.
      std::vector<uint8_t> source(store_bytes);
      for (size_t i = 0; i < source.size(); i += 4096) source[i] = static_cast<uint8_t>(i >> 12);
      const std::pair<double, double> write_read =
          DiskLimit(dir, spilled / object_bytes * object_bytes, object_bytes, source);
      out.Value("disk_write_gigabytes", "GB/s", [&] { return write_read.first; });
      out.Value("disk_read_gigabytes", "GB/s", [&] { return write_read.second; });
    });
  }
  std::error_code ignored;
  fs::remove_all(dir, ignored);
}

}  // namespace lumen::bench
