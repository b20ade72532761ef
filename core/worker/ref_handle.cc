// internal::RefHandle: one ObjectRef's registration in this process's
// reference counter (lumen/internal/runtime.h). Thread-safe: a handle made or
// dropped while Shutdown runs holds the runtime alive for that call
// (CurrentCoreWorker is shared), or finds none and does nothing.
#include "lumen/internal/runtime.h"

#include "absl/synchronization/mutex.h"
#include "lumen/worker/core_worker.h"

namespace lumen::internal {
namespace {

// The address string of the owner named last, shared by the handles made for
// it: a process makes most handles for one owner (itself), so one slot saves
// a heap copy of the address (~100 bytes) per reference. Thread-safe.
std::shared_ptr<const std::string> InternOwnerAddress(std::string address) {
  static absl::Mutex mu;
  static auto* last = new std::shared_ptr<const std::string>();  // never destroyed
  absl::MutexLock lock(&mu);
  if (*last == nullptr || **last != address) {
    *last = std::make_shared<const std::string>(std::move(address));
  }
  return *last;
}

}  // namespace

RefHandle::RefHandle(ObjectId id, std::string owner_address, bool decoded)
    : id_(id), owner_address_(InternOwnerAddress(std::move(owner_address))) {
  if (auto core = runtime::CurrentCoreWorker()) core->AddLocalRef(id_, *owner_address_, decoded);
}

RefHandle::~RefHandle() {
  if (auto core = runtime::CurrentCoreWorker()) core->RemoveLocalRef(id_);
}

void MarkRefEscaped(const RefHandle& ref) {
  if (auto core = runtime::CurrentCoreWorker()) core->MarkEscaped(ref.id());
}

}  // namespace lumen::internal
