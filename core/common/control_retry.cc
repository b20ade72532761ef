#include "lumen/common/control_retry.h"

#include <algorithm>
#include <atomic>
#include <random>

namespace lumen {
namespace {

uint64_t ClientId() {
  // Random per process: the head tells clients apart by it (not by
  // connection: each attempt may use a new one).
  static const uint64_t id = [] {
    std::random_device rd;
    uint64_t v = (static_cast<uint64_t>(rd()) << 32) ^ rd();
    return v == 0 ? 1 : v;
  }();
  return id;
}

std::atomic<uint64_t> next_request{1};

bool IsKvWrite(proto::KvOp op) {
  return op == proto::KvOp::PUT || op == proto::KvOp::DELETE || op == proto::KvOp::DELETE_PREFIX;
}

// The StoreRequest of a storeCreate, storeSeal, storeAbort or storeGet.
template <typename Envelope>
auto StoreRequestOf(Envelope request) {
  switch (request.which()) {
    case proto::Envelope::STORE_CREATE: return request.getStoreCreate();
    case proto::Envelope::STORE_SEAL: return request.getStoreSeal();
    case proto::Envelope::STORE_ABORT: return request.getStoreAbort();
    default: return request.getStoreGet();
  }
}

}  // namespace

uint64_t RetryClientId() { return ClientId(); }

std::chrono::milliseconds ControlRetryBackoff(int attempt) {
  return std::chrono::milliseconds(20) * (1 << std::min(attempt - 1, 4));
}

namespace {

// Where `request`'s key goes, initialised (a null builder when its message has
// no place for one, or is a query that must not carry one).
proto::RetryKey::Builder InitKey(proto::Envelope::Builder request, bool* has_place) {
  *has_place = true;
  switch (request.which()) {
    case proto::Envelope::CREATE_PLACEMENT_GROUP:
      return request.getCreatePlacementGroup().initRetryKey();
    case proto::Envelope::REGISTER_ACTOR_NAME:
      return request.getRegisterActorName().initRetryKey();
    case proto::Envelope::UNREGISTER_ACTOR_NAME:
      return request.getUnregisterActorName().initRetryKey();
    case proto::Envelope::UPDATE_ACTOR_ADDRESS:
      return request.getUpdateActorAddress().initRetryKey();
    case proto::Envelope::KV:
      // Only the writes: a query is resent as it is (SafeToResend), and a
      // wait's reply must not be replayed from the head's table.
      if (!IsKvWrite(request.getKv().getOp())) break;
      return request.getKv().initRetryKey();
    case proto::Envelope::REQUEST_LEASE:
      return request.getRequestLease().initRetryKey();
    // The store's requests that answer (objectstore/store_server.h).
    case proto::Envelope::STORE_CREATE:
      return request.getStoreCreate().initRetryKey();
    case proto::Envelope::STORE_SEAL:
      return request.getStoreSeal().initRetryKey();
    case proto::Envelope::STORE_ABORT:
      return request.getStoreAbort().initRetryKey();
    case proto::Envelope::STORE_GET:
      return request.getStoreGet().initRetryKey();
    default:
      break;
  }
  *has_place = false;
  return proto::RetryKey::Builder(nullptr);
}

}  // namespace

bool SetRetryKey(proto::Envelope::Builder request) {
  bool has_place = false;
  proto::RetryKey::Builder key = InitKey(request, &has_place);
  if (!has_place) return false;
  key.setClient(ClientId());
  key.setRequest(next_request.fetch_add(1, std::memory_order_relaxed));
  return true;
}

RetryKeyValue NewRetryKey() {
  return RetryKeyValue{ClientId(), next_request.fetch_add(1, std::memory_order_relaxed)};
}

bool SetRetryKey(proto::Envelope::Builder request, const RetryKeyValue& value) {
  bool has_place = false;
  proto::RetryKey::Builder key = InitKey(request, &has_place);
  if (!has_place) return false;
  key.setClient(value.client);
  key.setRequest(value.request);
  key.setAttempt(value.attempt);
  return true;
}

namespace {
template <typename Key>
std::optional<RetryKeyValue> Value(bool has, Key key) {
  if (!has) return std::nullopt;
  return RetryKeyValue{key.getClient(), key.getRequest(), key.getAttempt()};
}
}  // namespace

std::optional<RetryKeyValue> RetryKeyOf(proto::Envelope::Reader request) {
  switch (request.which()) {
    case proto::Envelope::CREATE_PLACEMENT_GROUP: {
      auto m = request.getCreatePlacementGroup();
      return Value(m.hasRetryKey(), m.getRetryKey());
    }
    case proto::Envelope::REGISTER_ACTOR_NAME: {
      auto m = request.getRegisterActorName();
      return Value(m.hasRetryKey(), m.getRetryKey());
    }
    case proto::Envelope::UNREGISTER_ACTOR_NAME: {
      auto m = request.getUnregisterActorName();
      return Value(m.hasRetryKey(), m.getRetryKey());
    }
    case proto::Envelope::UPDATE_ACTOR_ADDRESS: {
      auto m = request.getUpdateActorAddress();
      return Value(m.hasRetryKey(), m.getRetryKey());
    }
    case proto::Envelope::KV: {
      auto m = request.getKv();
      return Value(m.hasRetryKey(), m.getRetryKey());
    }
    case proto::Envelope::REQUEST_LEASE: {
      auto m = request.getRequestLease();
      return Value(m.hasRetryKey(), m.getRetryKey());
    }
    case proto::Envelope::PREPARE_BUNDLES: {
      auto m = request.getPrepareBundles();
      return Value(m.hasRetryKey(), m.getRetryKey());
    }
    case proto::Envelope::COMMIT_BUNDLES: {
      auto m = request.getCommitBundles();
      return Value(m.hasRetryKey(), m.getRetryKey());
    }
    case proto::Envelope::CANCEL_BUNDLES: {
      auto m = request.getCancelBundles();
      return Value(m.hasRetryKey(), m.getRetryKey());
    }
    case proto::Envelope::STORE_CREATE:
    case proto::Envelope::STORE_SEAL:
    case proto::Envelope::STORE_ABORT:
    case proto::Envelope::STORE_GET: {
      auto m = StoreRequestOf(request);
      return Value(m.hasRetryKey(), m.getRetryKey());
    }
    default:
      return std::nullopt;
  }
}

void SetRetryAttempt(proto::Envelope::Builder request, uint32_t attempt) {
  switch (request.which()) {
    case proto::Envelope::CREATE_PLACEMENT_GROUP:
      if (request.getCreatePlacementGroup().hasRetryKey())
        request.getCreatePlacementGroup().getRetryKey().setAttempt(attempt);
      break;
    case proto::Envelope::REGISTER_ACTOR_NAME:
      if (request.getRegisterActorName().hasRetryKey())
        request.getRegisterActorName().getRetryKey().setAttempt(attempt);
      break;
    case proto::Envelope::UNREGISTER_ACTOR_NAME:
      if (request.getUnregisterActorName().hasRetryKey())
        request.getUnregisterActorName().getRetryKey().setAttempt(attempt);
      break;
    case proto::Envelope::UPDATE_ACTOR_ADDRESS:
      if (request.getUpdateActorAddress().hasRetryKey())
        request.getUpdateActorAddress().getRetryKey().setAttempt(attempt);
      break;
    case proto::Envelope::KV:
      if (request.getKv().hasRetryKey()) request.getKv().getRetryKey().setAttempt(attempt);
      break;
    case proto::Envelope::REQUEST_LEASE:
      if (request.getRequestLease().hasRetryKey())
        request.getRequestLease().getRetryKey().setAttempt(attempt);
      break;
    case proto::Envelope::STORE_CREATE:
    case proto::Envelope::STORE_SEAL:
    case proto::Envelope::STORE_ABORT:
    case proto::Envelope::STORE_GET: {
      auto m = StoreRequestOf(request);
      if (m.hasRetryKey()) m.getRetryKey().setAttempt(attempt);
      break;
    }
    default:
      break;
  }
}

bool SafeToResend(proto::Envelope::Reader request) {
  if (RetryKeyOf(request).has_value()) return true;
  switch (request.which()) {
    // Queries and waits: they change nothing.
    case proto::Envelope::GET_NODES:
    case proto::Envelope::LOOKUP_ACTOR_NAME:
    case proto::Envelope::LOOKUP_ACTOR_BY_ID:
    case proto::Envelope::LIST_PLACEMENT_GROUPS:
    case proto::Envelope::WAIT_PLACEMENT_GROUP:
    case proto::Envelope::KV_GET:
    // A removal leaves the same state however often it is applied.
    case proto::Envelope::REMOVE_PLACEMENT_GROUP:
      return true;
    case proto::Envelope::KV: {
      auto op = request.getKv().getOp();
      return op == proto::KvOp::GET || op == proto::KvOp::EXISTS || op == proto::KvOp::KEYS ||
             op == proto::KvOp::WAIT;
    }
    default:
      return false;
  }
}

}  // namespace lumen
