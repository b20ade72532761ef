// CoreWorker's object entry points: Put (inline into the memory store, or
// through the StoreProvider into the node's store), Get and Wait (through the
// ObjectGetter), whose failures are thrown here as the API's exceptions
// (api_error.h).
#include <string>

#include "absl/strings/str_cat.h"
#include "core/worker/call_sites.h"
#include "core/worker/object_getter.h"
#include "core/worker/store_provider.h"
#include "core/worker/worker_state.h"
#include "lumen/common/error_kind.h"
#include "lumen/common/stream_copy.h"
#include "lumen/worker/api_error.h"
#include "lumen/worker/core_worker.h"

namespace lumen::runtime {

std::shared_ptr<internal::RefHandle> CoreWorker::PutEncoded(std::string encoded,
                                                            const std::source_location& where) {
  if (encoded.size() > options_.inline_limit) {
    return PutWithWriter(
        encoded.size(), [&](uint8_t* out) { CopyBytes(out, encoded.data(), encoded.size()); },
        where);
  }
  ObjectId id = ObjectId::ForPut();
  auto handle = std::make_shared<internal::RefHandle>(id, shared_listen_address_);
  auto value = std::make_shared<const std::string>(std::move(encoded));
  memory_store_->SetReady(id, [&](ObjectEntry& e) {
    e.kind = ObjectEntry::Kind::kInline;
    e.value = value;
  });
  return handle;
}

std::shared_ptr<internal::RefHandle> CoreWorker::PutWithWriter(
    uint64_t size, const std::function<void(uint8_t*)>& write, const std::source_location& where) {
  ObjectId id = ObjectId::ForPut();
  absl::StatusOr<uint8_t*> created = store_provider_->CreateWritable(id, size);
  if (!created.ok()) {
    if (created.status().code() == absl::StatusCode::kResourceExhausted) {
      ThrowError(ErrorKind::kObjectStoreFull, created.status().message());
    }
    ThrowError(ErrorKind::kError, absl::StrCat("Put failed: ", created.status().message()));
  }
  try {
    write(*created);
  } catch (...) {
    store_provider_->Abort(id, size);  // the half-written object goes
    throw;
  }
  absl::Status sealed = store_provider_->Seal(id, size);
  if (!sealed.ok()) {
    store_provider_->Abort(id, size);
    ThrowError(ErrorKind::kError, absl::StrCat("Put failed: ", sealed.message()));
  }
  auto handle = std::make_shared<internal::RefHandle>(id, shared_listen_address_);
  const std::string* site = CallSites::OfPut(where);  // before the table's lock
  memory_store_->SetReady(id, [&](ObjectEntry& e) {
    e.kind = ObjectEntry::Kind::kStored;
    e.stored_size = size;
    e.locations = {{node_id_, node_address_}};
    e.call_site = site;
  });
  return handle;
}

std::vector<internal::ObjectBytes> CoreWorker::Get(
    const std::vector<const internal::RefHandle*>& refs,
    std::optional<std::chrono::milliseconds> timeout) {
  return ValueOrThrow(object_getter_->Get(refs, timeout));
}

std::vector<bool> CoreWorker::Wait(const std::vector<const internal::RefHandle*>& refs,
                                   size_t num_returns,
                                   std::optional<std::chrono::milliseconds> timeout) {
  return ValueOrThrow(object_getter_->Wait(refs, num_returns, timeout));
}

}  // namespace lumen::runtime
