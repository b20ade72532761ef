#include "lumen/objectstore/store_server.h"

#include <stdlib.h>

#include <algorithm>
#include <boost/asio/post.hpp>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "lumen/common/format_bytes.h"
#include "lumen/common/logging.h"
#include "lumen/common/post.h"
#include "lumen/common/proto_util.h"
#include "lumen/common/task_events.h"

namespace lumen::objectstore {
namespace {

// Spill batches: several small objects per file, up to these bounds (an
// object larger than kMaxBatchBytes goes alone).
constexpr uint64_t kMaxBatchBytes = 64ull << 20;
constexpr size_t kMaxBatchObjects = 256;

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? "" : v;
}

}  // namespace

StoreReply ReplyOf(const absl::Status& status) {
  if (!status.ok()) return status;
  return StoreRegion{};
}

void FillStoreReply(proto::Envelope::Builder env, uint64_t request_id, const StoreReply& reply) {
  env.setRequestId(request_id);
  auto r = env.initStoreReply();
  r.setOk(reply.ok());
  r.setCode(static_cast<uint32_t>(reply.status().code()));
  r.setError(std::string(reply.status().message()));
  if (reply.ok()) {
    r.setOffset(reply->offset);
    r.setSize(reply->size);
  }
}

StoreOptions StoreOptions::FromEnv(uint64_t bytes, const std::string& spill_dir,
                                   boost::asio::io_context* io) {
  StoreOptions options{.bytes = bytes, .spill_dir = spill_dir, .io = io};
  int64_t ms = 0;
  if (absl::SimpleAtoi(Env("LUMEN_OBJECT_STORE_FULL_GRACE_MS"), &ms) && ms >= 0) {
    options.full_grace = std::chrono::milliseconds(ms);
  }
  std::string reserve = Env("LUMEN_OBJECT_STORE_RESERVE");
  if (reserve == "1" || reserve == "start") {
    options.reserve = StoreOptions::Reserve::kAtStart;
  } else if (reserve == "0" || reserve == "object") {
    options.reserve = StoreOptions::Reserve::kPerObject;
  }
  options.reserve_delay = kDefaultReserveDelay;
  if (absl::SimpleAtoi(Env("LUMEN_OBJECT_STORE_RESERVE_DELAY_MS"), &ms) && ms >= 0) {
    options.reserve_delay = std::chrono::milliseconds(ms);
  }
  return options;
}

absl::StatusOr<std::unique_ptr<StoreServer>> StoreServer::Create(StoreOptions options) {
  if (options.io == nullptr) return absl::InvalidArgumentError("StoreOptions.io is required");
  // The segment is a memfd: its pages come from the machine's memory (and
  // count against this process's cgroup), not from /dev/shm, whose size does
  // not limit it.
  if (uint64_t available = AvailableMemoryBytes(); available != 0 && options.bytes > available) {
    bool container = MemoryLimitedByCgroup();
    return absl::ResourceExhaustedError(absl::StrCat(
        "the object store needs ", FormatBytes(options.bytes), " but ",
        container ? "this container's memory limit leaves" : "this machine has", " only ",
        FormatBytes(available), " of memory available (short by ",
        FormatBytes(options.bytes - available),
        "); lower --object-store-memory, or give the container more memory (docker run "
        "--memory=...; the store is a memfd, so /dev/shm and --shm-size do not limit it)"));
  }
  auto segment = ShmSegment::Create("lumen-store", options.bytes);
  if (!segment.ok()) return segment.status();
  if (options.reserve == StoreOptions::Reserve::kAtStart) {
    if (absl::Status s = (*segment)->Reserve(0, options.bytes); !s.ok()) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "cannot reserve the ", FormatBytes(options.bytes), " of the object store: ",
          s.message()));
    }
  }
  return std::unique_ptr<StoreServer>(new StoreServer(std::move(options), std::move(*segment)));
}

StoreServer::StoreServer(StoreOptions options, std::unique_ptr<ShmSegment> segment)
    : options_(std::move(options)),
      segment_(std::move(segment)),
      table_(segment_.get(), segment_->size()),
      timer_(*options_.io),
      reserve_timer_(*options_.io),
      index_([this](const std::string& path) {
        if (worker_ != nullptr) worker_->Remove(path);
      }) {
  worker_ = std::make_unique<SpillWorker>(
      [io = options_.io, alive = std::weak_ptr<char>(alive_)](std::function<void()> fn) {
        lumen::Post(*io, "store.spill_done", [alive, fn = std::move(fn)] {
          if (alive.lock()) fn();
        });
      });
  if (options_.reserve != StoreOptions::Reserve::kBackground) return;
  if (options_.reserve_delay <= std::chrono::milliseconds(0)) {
    reserver_ = std::make_unique<SegmentReserver>(segment_.get(), SegmentReserver::Options{});
    return;
  }
  // Later: its seconds of page zeroing would otherwise overlap the node's
  // start and a driver's Init (issue 8: init_seconds). SCHED_IDLE does not
  // keep them off the critical path: on an idle machine the thread takes the
  // other core, and with autogroup scheduling it yields only to this
  // process's own threads, not to the driver's and the head's.
  reserve_timer_.expires_after(options_.reserve_delay);
  reserve_timer_.async_wait([this, alive = std::weak_ptr<char>(alive_)](
                                const boost::system::error_code& ec) {
    if (ec || !alive.lock() || stopped_) return;
    reserver_ = std::make_unique<SegmentReserver>(segment_.get(), SegmentReserver::Options{});
  });
}

StoreServer::~StoreServer() { Stop(); }

void StoreServer::Stop() {
  if (stopped_) return;
  stopped_ = true;
  worker_.reset();  // joins: nothing writes or reads our files any more
  reserve_timer_.cancel();
  reserver_.reset();  // joins between two chunks
  parked_.clear();
  restoring_.clear();
  timer_.cancel();
  index_.Clear();  // the directory goes with all of them
  if (!spill_path_.empty()) {
    std::error_code ignored;
    std::filesystem::remove_all(spill_path_, ignored);
  }
}

uint64_t StoreServer::ReservedBytes() const {
  switch (options_.reserve) {
    case StoreOptions::Reserve::kAtStart:
      return segment_->size();
    case StoreOptions::Reserve::kBackground:
      return reserver_ != nullptr ? reserver_->reserved_bytes() : 0;
    case StoreOptions::Reserve::kPerObject:
      break;
  }
  return 0;
}

absl::Status StoreServer::Handle(const StoreCaller& caller, proto::Envelope::Reader msg,
                                 ReplyFn reply) {
  io_thread_.Check("StoreServer");
  bool remote_delete = !caller.local && msg.isStoreDelete();
  if (!caller.local && !remote_delete) {
    return absl::PermissionDeniedError("store requests need a driver or worker hello");
  }
  auto id_of = [](proto::StoreRequest::Reader r) { return IdFrom<ObjectId>(r.getObjectId()); };
  // The requests that answer may carry a key (store_repeats.h): a resend of
  // one answered already gets that answer again and changes nothing.
  StoreKey key;
  switch (msg.which()) {
    case proto::Envelope::STORE_CREATE:
      key = StoreKeyOf(caller.client, msg.getStoreCreate());
      break;
    case proto::Envelope::STORE_SEAL:
      key = StoreKeyOf(caller.client, msg.getStoreSeal());
      break;
    case proto::Envelope::STORE_ABORT:
      key = StoreKeyOf(caller.client, msg.getStoreAbort());
      break;
    case proto::Envelope::STORE_GET:
      key = StoreKeyOf(caller.client, msg.getStoreGet());
      break;
    default:
      break;
  }
  if (key.resend) {
    if (const StoreReply* kept = repeats_.Find(key)) {
      reply(*kept);
      return absl::OkStatus();
    }
  }
  switch (msg.which()) {
    case proto::Envelope::STORE_CREATE: {
      auto req = msg.getStoreCreate();
      ObjectId id = id_of(req);
      uint64_t size = req.getSize();
      if (size > table_.allocator().capacity()) {
        Answer(key, reply, absl::ResourceExhaustedError(absl::StrCat(
            "object store full: an object of ", FormatBytes(size),
            " is larger than the whole object store (", FormatBytes(table_.allocator().capacity()),
            "); raise --object-store-memory")));
        return absl::OkStatus();
      }
      // A detached actor's objects belong to no job: they outlive its creator's,
      // and whoever owns them may free them.
      JobId job = caller.detached ? JobId::Nil() : caller.job;
      Allocate(Parked{caller.client, id, size, /*secondary=*/false,
                      std::chrono::steady_clock::now() + options_.full_grace,
                      [this, id, job, owner = caller.owner, size, key,
                       reply = std::move(reply)](absl::StatusOr<uint64_t> at) {
                        if (!at.ok()) {
                          Answer(key, reply, at.status());
                          return;
                        }
                        records_.Set(id, {.job = job, .owner = owner});
                        Answer(key, reply, StoreRegion{*at, size});
                      }});
      return absl::OkStatus();
    }
    case proto::Envelope::STORE_SEAL:
      Answer(key, reply, ReplyOf(table_.Seal(caller.client, id_of(msg.getStoreSeal()))));
      ServeParked();  // the sealed object may be spilled now
      return absl::OkStatus();
    case proto::Envelope::STORE_ABORT: {
      ObjectId id = id_of(msg.getStoreAbort());
      absl::Status status = table_.Abort(caller.client, id);
      if (status.ok()) records_.Erase(id);
      Answer(key, reply, ReplyOf(status));
      ServeParked();
      return absl::OkStatus();
    }
    case proto::Envelope::STORE_GET: {
      ObjectId id = id_of(msg.getStoreGet());
      auto loc = table_.Get(caller.client, id);
      if (loc.ok()) {
        Answer(key, reply, StoreRegion{loc->offset, loc->size});
      } else if (restoring_.contains(id) || (!table_.Contains(id) && index_.Contains(id))) {
        StartRestore(id, Restore::Waiter{caller.client, std::move(reply), key});
      } else {
        Answer(key, reply, loc.status());
      }
      return absl::OkStatus();
    }
    case proto::Envelope::STORE_RELEASE:
      table_.Release(caller.client, id_of(msg.getStoreRelease()));
      ServeParked();
      return absl::OkStatus();
    case proto::Envelope::STORE_DELETE: {
      // Only the job that created an object frees it.
      ObjectId id = id_of(msg.getStoreDelete());
      const ObjectRecords::Record* record = records_.Find(id);
      if (record == nullptr || (!record->job.IsNil() && record->job != caller.job)) {
        return absl::OkStatus();
      }
      Forget(id);
      ServeParked();
      return absl::OkStatus();
    }
    default: {
      static auto* limiter = new logging::RateLimiter(5, std::chrono::seconds(1));
      uint64_t suppressed = 0;
      if (limiter->Allow(&suppressed)) {
        LUMEN_LOG(WARNING) << "ignoring an unexpected message (" << msg.which()
                           << ") from store client " << caller.client << " (" << suppressed
                           << " more suppressed)";
      }
      return absl::OkStatus();
    }
  }
}

void StoreServer::Answer(const StoreKey& key, const ReplyFn& reply, const StoreReply& answer) {
  repeats_.Record(key, answer);
  reply(answer);
}

void StoreServer::Forget(const ObjectId& id) {
  records_.Erase(id);
  table_.Delete(id);
  index_.Remove(id);
}

void StoreServer::DisconnectClient(ClientId client) {
  io_thread_.Check("StoreServer");
  table_.DisconnectClient(client);
  repeats_.Forget(client);
  for (auto it = parked_.begin(); it != parked_.end();) {
    it = it->client == client ? parked_.erase(it) : std::next(it);
  }
  for (auto& [id, restore] : restoring_) {
    std::erase_if(restore.waiters, [client](const Restore::Waiter& w) { return w.client == client; });
  }
  ServeParked();
}

void StoreServer::EndJob(const JobId& job) {
  io_thread_.Check("StoreServer");
  std::vector<ObjectId> ids;
  records_.ForEach([&](const ObjectId& id, const ObjectRecords::Record& record) {
    if (record.job == job) ids.push_back(id);
  });
  for (const ObjectId& id : ids) Forget(id);
  ServeParked();
}

void StoreServer::OwnerGone(ClientId owner) {
  io_thread_.Check("StoreServer");
  if (owner == 0) return;
  // O(that owner's objects): the index lists them (a copy, as Forget erases).
  std::vector<ObjectId> ids = records_.OwnedBy(owner);
  for (const ObjectId& id : ids) Forget(id);
  if (!ids.empty()) ServeParked();
}

absl::StatusOr<std::span<const uint8_t>> StoreServer::ServeOut(const ObjectId& id) {
  io_thread_.Check("StoreServer");
  auto loc = table_.Get(kTransferClient, id);
  if (loc.ok()) return std::span<const uint8_t>(segment_->readonly_base() + loc->offset, loc->size);
  if (restoring_.contains(id) || (!table_.Contains(id) && index_.Contains(id))) {
    StartRestore(id, std::nullopt);
    return absl::AbortedError(absl::StrCat("object ", id.Hex(),
                                           " is spilled to disk on its node; it is being restored"));
  }
  return loc.status();
}

void StoreServer::EndServeOut(const ObjectId& id) {
  io_thread_.Check("StoreServer");
  table_.Release(kTransferClient, id);
  ServeParked();
}

void StoreServer::BeginPullIn(const ObjectId& id, uint64_t size, const JobId& job,
                              PullInFn done) {
  io_thread_.Check("StoreServer");
  if (size > table_.allocator().capacity()) {
    done(absl::ResourceExhaustedError(absl::StrCat(
        "object store full: an object of ", FormatBytes(size),
        " is larger than the whole object store (", FormatBytes(table_.allocator().capacity()),
        ")")));
    return;
  }
  Allocate(Parked{kPullClient, id, size, /*secondary=*/true,
                  std::chrono::steady_clock::now() + options_.full_grace,
                  [this, id, job, done = std::move(done)](absl::StatusOr<uint64_t> at) {
                    if (!at.ok()) {
                      done(at.status());
                      return;
                    }
                    records_.Set(id, {.job = job, .owner = 0});
                    done(segment_->writable_base() + *at);
                  }});
}

absl::Status StoreServer::SealPulledIn(const ObjectId& id) {
  io_thread_.Check("StoreServer");
  absl::Status status = table_.Seal(kPullClient, id);
  ServeParked();
  return status;
}

void StoreServer::AbortPulledIn(const ObjectId& id) {
  io_thread_.Check("StoreServer");
  // Not found or already sealed: nothing of ours to give back.
  if (absl::Status s = table_.Abort(kPullClient, id); !s.ok()) {
    LUMEN_LOG(DEBUG) << "abort of pulled object " << id.Hex() << ": " << s;
  } else {
    records_.Erase(id);
  }
  ServeParked();
}

bool StoreServer::IsSealed(const ObjectId& id) const {
  auto state = table_.GetState(id);
  return state.ok() && *state == ObjectState::kSealed;
}

SpillStats StoreServer::GetSpillStats() const {
  SpillStats stats = stats_;
  stats.on_disk_objects = index_.num_objects();
  stats.on_disk_bytes = index_.bytes();
  stats.spill_files = index_.num_files();
  stats.parked_creates = parked_.size();
  stats.spilling_bytes = spilling_bytes_;
  return stats;
}

std::vector<StoreObjectInfo> StoreServer::LargestObjects(size_t n) const {
  io_thread_.Check("StoreServer");
  // A min-heap of the n largest seen so far: its top is the first to go.
  auto larger = [](const StoreObjectInfo& a, const StoreObjectInfo& b) {
    return a.size != b.size ? a.size > b.size : a.id < b.id;
  };
  std::vector<StoreObjectInfo> top;
  if (n == 0) return top;
  auto offer = [&](StoreObjectInfo info) {
    if (top.size() == n) {
      if (!larger(info, top.front())) return;
      std::pop_heap(top.begin(), top.end(), larger);
      top.pop_back();
    }
    if (const ObjectRecords::Record* record = records_.Find(info.id)) info.job = record->job;
    top.push_back(std::move(info));
    std::push_heap(top.begin(), top.end(), larger);
  };
  table_.ForEachObject([&](const ObjectTable::ObjectInfo& o) {
    offer(StoreObjectInfo{.id = o.id,
                          .size = o.size,
                          .state = o.state == ObjectState::kCreated  ? "CREATED"
                                   : o.state == ObjectState::kSealed ? "SEALED"
                                                                     : "DELETE_PENDING",
                          .pins = o.pins,
                          .on_disk = index_.Contains(o.id),
                          .secondary = o.secondary});
  });
  index_.ForEach([&](const ObjectId& id, const SpillIndex::Location& at) {
    if (table_.Contains(id)) return;  // listed above, in memory
    offer(StoreObjectInfo{.id = id, .size = at.size, .state = "SPILLED", .on_disk = true});
  });
  std::sort_heap(top.begin(), top.end(), larger);
  return top;
}

// ---------------------------------------------------------------------------
// Making room

void StoreServer::Allocate(Parked request) {
  if (stopped_) return;
  auto offset = table_.Create(request.client, request.id, request.size, request.secondary);
  if (offset.ok() || offset.status().code() != absl::StatusCode::kResourceExhausted) {
    request.done(offset);
    return;
  }
  parked_.push_back(std::move(request));
  ArmTimer();
  ServeParked();
}

void StoreServer::ServeParked() {
  if (stopped_ || parked_.empty()) return;
  // Whether every parked request could be given memory now (approximately:
  // the largest fits a free block and the sum fits the free bytes).
  auto fits = [this] {
    uint64_t total = 0;
    uint64_t largest = 0;
    for (const Parked& p : parked_) {
      total += p.size;
      largest = std::max(largest, p.size);
    }
    const Allocator& a = table_.allocator();
    return a.largest_free_block() >= largest && a.capacity() - a.used() >= total;
  };
  auto grant_fitting = [this] {
    std::vector<std::pair<std::function<void(absl::StatusOr<uint64_t>)>, absl::StatusOr<uint64_t>>>
        granted;
    for (auto it = parked_.begin(); it != parked_.end();) {
      auto offset = table_.Create(it->client, it->id, it->size, it->secondary);
      if (offset.ok() || offset.status().code() != absl::StatusCode::kResourceExhausted) {
        granted.emplace_back(std::move(it->done), std::move(offset));
        it = parked_.erase(it);
      } else {
        ++it;
      }
    }
    // Answers after the walk: an answer may start another request.
    for (auto& [done, offset] : granted) done(std::move(offset));
  };
  grant_fitting();
  if (parked_.empty()) return;
  // Free what costs no disk write: secondary copies first, then objects that
  // already have a disk copy, lowest offset first.
  bool evicted = false;
  std::vector<ObjectTable::Candidate> candidates;
  if (!fits()) candidates = table_.EvictionCandidates();
  for (int pass = 0; pass < 2 && !fits(); ++pass) {
    for (const ObjectTable::Candidate& c : candidates) {
      if (fits()) break;
      bool cheap = pass == 0 ? c.secondary : (!c.secondary && index_.Contains(c.id));
      if (!cheap || table_.Evict(c.id) == 0) continue;
      evicted = true;
      if (c.secondary) {
        records_.Erase(c.id);
        ++stats_.evicted_secondary;
      }
    }
  }
  if (evicted) grant_fitting();
  if (parked_.empty()) return;

  // Then spill primary copies: enough bytes in flight to cover the parked
  // requests and a little ahead, so a driver putting in a loop overlaps with
  // the writes.
  if (options_.spill_dir.empty() || worker_ == nullptr) return;
  uint64_t needed = 0;
  for (const Parked& p : parked_) needed += p.size;
  const uint64_t ahead = std::min<uint64_t>(table_.allocator().capacity() / 4, kMaxBatchBytes);
  const uint64_t target = needed + ahead;
  if (spilling_bytes_ >= target) return;
  if (spill_path_.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(options_.spill_dir, ec);
    std::string pattern = options_.spill_dir + "/lumen-spill-XXXXXX";
    if (ec || ::mkdtemp(pattern.data()) == nullptr) {
      static auto* limiter = new logging::RateLimiter(1, std::chrono::seconds(10));
      uint64_t suppressed = 0;
      if (limiter->Allow(&suppressed)) {
        LUMEN_LOG(WARNING) << "cannot create a spill directory under " << options_.spill_dir
                           << ": " << (ec ? ec.message() : std::strerror(errno));
      }
      return;
    }
    spill_path_ = pattern;
  }
  if (evicted || candidates.empty()) candidates = table_.EvictionCandidates();
  std::vector<ObjectTable::Candidate> batch;
  uint64_t batch_bytes = 0;
  for (const ObjectTable::Candidate& c : candidates) {
    if (spilling_bytes_ >= target) break;
    if (c.secondary || index_.Contains(c.id) || !table_.Contains(c.id)) continue;
    if (!batch.empty() && (batch_bytes + c.size > kMaxBatchBytes || batch.size() >= kMaxBatchObjects)) {
      SpillBatch(std::move(batch));
      batch.clear();
      batch_bytes = 0;
    }
    batch.push_back(c);
    batch_bytes += c.size;
    spilling_bytes_ += c.allocated;
  }
  if (!batch.empty()) SpillBatch(std::move(batch));
}

void StoreServer::SpillBatch(std::vector<ObjectTable::Candidate> batch) {
  std::vector<SpillWorker::Piece> pieces;
  std::vector<SpillIndex::Range> ranges;
  uint64_t file_offset = 0;
  for (const ObjectTable::Candidate& c : batch) {
    // Pinned while written: neither freed nor moved under the writer.
    auto loc = table_.Get(kSpillClient, c.id);
    if (!loc.ok()) {  // cannot happen for a candidate; write an empty range
      ranges.push_back({file_offset, 0});
      pieces.push_back({nullptr, 0});
      continue;
    }
    spilling_.insert(c.id);
    pieces.push_back({segment_->readonly_base() + loc->offset, loc->size});
    ranges.push_back({file_offset, loc->size});
    file_offset += loc->size;
  }
  std::string path = absl::StrCat(spill_path_, "/", next_file_++);
  const int64_t started_us = TaskEventRecorder::NowMicros();
  worker_->Write(path, std::move(pieces),
                 [this, path, batch = std::move(batch), ranges, started_us](absl::Status status) {
                   OnSpilled(path, batch, ranges, status, started_us);
                 });
}

void StoreServer::OnSpilled(const std::string& path,
                            const std::vector<ObjectTable::Candidate>& batch,
                            const std::vector<SpillIndex::Range>& ranges,
                            const absl::Status& status, int64_t started_us) {
  io_thread_.Check("StoreServer");
  std::vector<std::pair<ObjectId, SpillIndex::Range>> written;
  for (size_t i = 0; i < batch.size(); ++i) {
    const ObjectId& id = batch[i].id;
    spilling_bytes_ -= batch[i].allocated;
    if (!spilling_.erase(id)) continue;
    // Deleted while written: its range of the file is dead.
    auto state = table_.GetState(id);
    if (status.ok() && state.ok() && *state == ObjectState::kSealed) {
      written.push_back({id, ranges[i]});
    }
    table_.Release(kSpillClient, id);
  }
  if (!status.ok()) {
    static auto* limiter = new logging::RateLimiter(1, std::chrono::seconds(10));
    uint64_t suppressed = 0;
    if (limiter->Allow(&suppressed)) LUMEN_LOG(WARNING) << "spilling objects failed: " << status;
  } else {
    index_.AddFile(path, written);
    uint64_t file_bytes = 0;
    for (const auto& [id, range] : written) {
      ++stats_.spilled_objects;
      stats_.spilled_bytes += range.size;
      file_bytes += range.size;
      // A reader that pinned it meanwhile keeps it in memory; the disk copy
      // lets it go later without another write.
      table_.Evict(id);
    }
    if (!written.empty()) {
      TaskEvent spilled{.kind = TaskEventKind::kSpill,
                        .name = absl::StrCat(written.size(), " objects"),
                        .bytes = file_bytes};
      spilled.duration_us = TaskEventRecorder::NowMicros() - started_us;
      TaskEvents().RecordEvent(spilled);
    }
  }
  ServeParked();
}

void StoreServer::StartRestore(const ObjectId& id, std::optional<Restore::Waiter> waiter) {
  if (stopped_) return;
  auto [it, fresh] = restoring_.try_emplace(id);
  if (waiter) it->second.waiters.push_back(std::move(*waiter));
  if (!fresh) return;
  const SpillIndex::Location* at = index_.Find(id);
  Allocate(Parked{kRestoreClient, id, at->size, /*secondary=*/false,
                  std::chrono::steady_clock::now() + options_.full_grace,
                  [this, id](absl::StatusOr<uint64_t> offset) {
                    if (!offset.ok()) {
                      OnRestored(id, offset.status());
                      return;
                    }
                    const SpillIndex::Location* at = index_.Find(id);
                    if (at == nullptr) {  // freed meanwhile
                      OnRestored(id, absl::NotFoundError(
                                         absl::StrCat("object ", id.Hex(), " was freed")));
                      return;
                    }
                    // The copy's time, not the wait for memory before it.
                    if (auto r = restoring_.find(id); r != restoring_.end()) {
                      r->second.started_us = TaskEventRecorder::NowMicros();
                    }
                    segment_->PrefaultForWrite(*offset, at->size);
                    worker_->Read(at->path, at->offset, at->size,
                                  segment_->writable_base() + *offset,
                                  [this, id](absl::Status status) { OnRestored(id, status); });
                  }});
}

void StoreServer::OnRestored(const ObjectId& id, const absl::Status& read) {
  io_thread_.Check("StoreServer");
  absl::Status status = read;
  if (status.ok()) {
    status = table_.Seal(kRestoreClient, id);
    if (status.ok()) {
      ++stats_.restored_objects;
      if (const SpillIndex::Location* at = index_.Find(id)) {
        stats_.restored_bytes += at->size;
        if (auto r = restoring_.find(id); r != restoring_.end()) {
          TaskEvent restored{.kind = TaskEventKind::kRestore, .name = id.Hex(), .bytes = at->size};
          restored.duration_us = TaskEventRecorder::NowMicros() - r->second.started_us;
          TaskEvents().RecordEvent(restored);
        }
      }
    }
  } else {
    (void)table_.Abort(kRestoreClient, id);  // NotFound when it never got memory
    LUMEN_LOG(WARNING) << "restoring object " << id.Hex() << " failed: " << status;
  }
  std::vector<Restore::Waiter> waiters;
  if (auto it = restoring_.find(id); it != restoring_.end()) {
    waiters = std::move(it->second.waiters);
    restoring_.erase(it);
  }
  for (Restore::Waiter& w : waiters) {
    if (!status.ok()) {
      Answer(w.key, w.reply, status);
      continue;
    }
    auto loc = table_.Get(w.client, id);
    if (loc.ok()) {
      Answer(w.key, w.reply, StoreRegion{loc->offset, loc->size});
    } else {
      Answer(w.key, w.reply, loc.status());
    }
  }
  ServeParked();
}

void StoreServer::ArmTimer() {
  if (parked_.empty() || stopped_) return;
  auto earliest = parked_.front().deadline;
  for (const Parked& p : parked_) earliest = std::min(earliest, p.deadline);
  timer_.expires_at(earliest);
  timer_.async_wait([this, alive = std::weak_ptr<char>(alive_)](boost::system::error_code ec) {
    if (ec || !alive.lock()) return;
    OnTimer();
  });
}

void StoreServer::OnTimer() {
  io_thread_.Check("StoreServer");
  const auto now = std::chrono::steady_clock::now();
  std::vector<std::pair<std::function<void(absl::StatusOr<uint64_t>)>, absl::Status>> expired;
  for (auto it = parked_.begin(); it != parked_.end();) {
    if (it->deadline <= now) {
      expired.emplace_back(std::move(it->done), FullError(it->size));
      ++stats_.failed_creates;
      it = parked_.erase(it);
    } else {
      ++it;
    }
  }
  for (auto& [done, why] : expired) done(why);
  ArmTimer();
}

absl::Status StoreServer::FullError(uint64_t size) const {
  const Allocator& a = table_.allocator();
  return absl::ResourceExhaustedError(absl::StrCat(
      "object store full: no room for an object of ", FormatBytes(size), " within ",
      options_.full_grace.count(), " ms; ", FormatBytes(a.used()), " of ",
      FormatBytes(a.capacity()), " in use, ", FormatBytes(table_.PinnedBytes()),
      " pinned by readers or being written, ", FormatBytes(spilling_bytes_),
      " being spilled, largest free block ", FormatBytes(a.largest_free_block()),
      options_.spill_dir.empty() ? " (spilling is off)" : ""));
}

}  // namespace lumen::objectstore
