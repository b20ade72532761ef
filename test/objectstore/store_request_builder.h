// The store's unit tests (store_server_test, store_repeats_test) send it
// requests as a client would: which one, and its member of the envelope.
//
//   proto::StoreRequest::Builder req = InitStoreRequest(env, StoreOp::kGet);
#pragma once

#include "lumen/proto/lumen.capnp.h"

namespace lumen::objectstore {

enum class StoreOp { kCreate, kSeal, kAbort, kGet, kRelease, kDelete };

inline proto::StoreRequest::Builder InitStoreRequest(proto::Envelope::Builder env, StoreOp op) {
  switch (op) {
    case StoreOp::kCreate: return env.initStoreCreate();
    case StoreOp::kSeal: return env.initStoreSeal();
    case StoreOp::kAbort: return env.initStoreAbort();
    case StoreOp::kGet: return env.initStoreGet();
    case StoreOp::kRelease: return env.initStoreRelease();
    case StoreOp::kDelete: return env.initStoreDelete();
  }
  return env.initStoreGet();
}

}  // namespace lumen::objectstore
