#include "lumen/objectstore/store_server.h"

#include <chrono>
#include <string>

#include "lumen/common/logging.h"
#include "lumen/common/proto_util.h"

namespace lumen::objectstore {

void FillStoreReply(proto::Envelope::Builder env, uint64_t request_id, const StoreReply& reply) {
  env.setRequestId(request_id);
  auto r = env.initStoreReply();
  r.setOk(reply.status.ok());
  r.setCode(static_cast<uint32_t>(reply.status.code()));
  r.setError(std::string(reply.status.message()));
  r.setOffset(reply.offset);
  r.setSize(reply.size);
}

absl::StatusOr<std::unique_ptr<StoreServer>> StoreServer::Create(uint64_t bytes) {
  auto segment = ShmSegment::Create("lumen-store", bytes);
  if (!segment.ok()) return segment.status();
  return std::unique_ptr<StoreServer>(new StoreServer(std::move(*segment)));
}

StoreServer::StoreServer(std::unique_ptr<ShmSegment> segment)
    : segment_(std::move(segment)), table_(segment_.get(), segment_->size()) {}

absl::StatusOr<std::optional<StoreReply>> StoreServer::Handle(const StoreCaller& caller,
                                                              proto::Envelope::Reader msg) {
  io_thread_.Check("StoreServer");
  bool remote_delete = !caller.local && msg.isStoreDelete();
  if (!caller.local && !remote_delete) {
    return absl::PermissionDeniedError("store requests need a driver or worker hello");
  }
  auto id_of = [](proto::StoreRequest::Reader r) { return IdFrom<ObjectId>(r.getObjectId()); };
  switch (msg.which()) {
    case proto::Envelope::STORE_CREATE: {
      auto req = msg.getStoreCreate();
      auto offset = table_.Create(caller.client, id_of(req), req.getSize());
      // A detached actor's objects belong to no job: they outlive its creator's,
      // and whoever owns them may free them.
      if (offset.ok()) object_jobs_[id_of(req)] = caller.detached ? JobId::Nil() : caller.job;
      return StoreReply{offset.status(), offset.ok() ? *offset : 0, req.getSize()};
    }
    case proto::Envelope::STORE_SEAL:
      return StoreReply{table_.Seal(caller.client, id_of(msg.getStoreSeal()))};
    case proto::Envelope::STORE_ABORT: {
      ObjectId id = id_of(msg.getStoreAbort());
      absl::Status status = table_.Abort(caller.client, id);
      if (status.ok()) object_jobs_.erase(id);
      return StoreReply{status};
    }
    case proto::Envelope::STORE_GET: {
      auto loc = table_.Get(caller.client, id_of(msg.getStoreGet()));
      return StoreReply{loc.status(), loc.ok() ? loc->offset : 0, loc.ok() ? loc->size : 0};
    }
    case proto::Envelope::STORE_RELEASE:
      table_.Release(caller.client, id_of(msg.getStoreRelease()));
      return std::nullopt;
    case proto::Envelope::STORE_DELETE: {
      // Only the job that created an object frees it.
      ObjectId id = id_of(msg.getStoreDelete());
      auto jit = object_jobs_.find(id);
      if (jit == object_jobs_.end() || (!jit->second.IsNil() && jit->second != caller.job)) {
        return std::nullopt;
      }
      object_jobs_.erase(jit);
      table_.Delete(id);
      return std::nullopt;
    }
    default: {
      static auto* limiter = new logging::RateLimiter(5, std::chrono::seconds(1));
      uint64_t suppressed = 0;
      if (limiter->Allow(&suppressed)) {
        LUMEN_LOG(WARNING) << "ignoring an unexpected message (" << msg.which()
                           << ") from store client " << caller.client << " (" << suppressed
                           << " more suppressed)";
      }
      return std::nullopt;
    }
  }
}

void StoreServer::DisconnectClient(ClientId client) {
  io_thread_.Check("StoreServer");
  table_.DisconnectClient(client);
}

void StoreServer::EndJob(const JobId& job) {
  io_thread_.Check("StoreServer");
  for (auto it = object_jobs_.begin(); it != object_jobs_.end();) {
    if (it->second == job) {
      table_.Delete(it->first);
      object_jobs_.erase(it++);
    } else {
      ++it;
    }
  }
}

absl::StatusOr<std::span<const uint8_t>> StoreServer::ServeOut(const ObjectId& id) {
  io_thread_.Check("StoreServer");
  auto loc = table_.Get(kTransferClient, id);
  if (!loc.ok()) return loc.status();
  return std::span<const uint8_t>(segment_->readonly_base() + loc->offset, loc->size);
}

void StoreServer::EndServeOut(const ObjectId& id) {
  io_thread_.Check("StoreServer");
  table_.Release(kTransferClient, id);
}

absl::StatusOr<uint8_t*> StoreServer::BeginPullIn(const ObjectId& id, uint64_t size,
                                                  const JobId& job) {
  io_thread_.Check("StoreServer");
  auto offset = table_.Create(kPullClient, id, size);
  if (!offset.ok()) return offset.status();
  object_jobs_[id] = job;
  return segment_->writable_base() + *offset;
}

absl::Status StoreServer::SealPulledIn(const ObjectId& id) {
  io_thread_.Check("StoreServer");
  return table_.Seal(kPullClient, id);
}

void StoreServer::AbortPulledIn(const ObjectId& id) {
  io_thread_.Check("StoreServer");
  // Not found or already sealed: nothing of ours to give back.
  if (absl::Status s = table_.Abort(kPullClient, id); !s.ok()) {
    LUMEN_LOG(DEBUG) << "abort of pulled object " << id.Hex() << ": " << s;
  }
  object_jobs_.erase(id);
}

bool StoreServer::IsSealed(const ObjectId& id) const {
  auto state = table_.GetState(id);
  return state.ok() && *state == ObjectState::kSealed;
}

}  // namespace lumen::objectstore
