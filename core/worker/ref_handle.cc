// internal::RefHandle: one ObjectRef's registration in this process's
// reference counter (lumen/internal/runtime.h). Thread-safe: a handle made or
// dropped while Shutdown runs holds the runtime alive for that call
// (CurrentCoreWorker is shared), or finds none and does nothing.
#include "lumen/internal/runtime.h"
#include "lumen/worker/core_worker.h"

namespace lumen::internal {

RefHandle::RefHandle(ObjectId id, std::string owner_address, bool decoded)
    : RefHandle(id, std::make_shared<const std::string>(std::move(owner_address)), decoded) {}

RefHandle::RefHandle(ObjectId id, std::shared_ptr<const std::string> owner_address, bool decoded)
    : id_(id), owner_address_(std::move(owner_address)) {
  if (auto core = runtime::CurrentCoreWorker()) {
    entry_ = core->AddLocalRef(id_, *owner_address_, decoded);
    runtime_generation_ = core->generation();
  }
}

RefHandle::~RefHandle() {
  if (auto core = runtime::CurrentCoreWorker()) core->RemoveLocalRef(id_);
}

void MarkRefEscaped(const RefHandle& ref) {
  if (auto core = runtime::CurrentCoreWorker()) core->MarkEscaped(ref.id());
}

}  // namespace lumen::internal
