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

}  // namespace

uint64_t RetryClientId() { return ClientId(); }

std::chrono::milliseconds ControlRetryBackoff(int attempt) {
  return std::chrono::milliseconds(20) * (1 << std::min(attempt - 1, 4));
}

bool SetRetryKey(proto::Envelope::Builder request) {
  proto::RetryKey::Builder key(nullptr);
  switch (request.which()) {
    case proto::Envelope::CREATE_PLACEMENT_GROUP:
      key = request.getCreatePlacementGroup().initRetryKey();
      break;
    case proto::Envelope::REGISTER_ACTOR_NAME:
      key = request.getRegisterActorName().initRetryKey();
      break;
    case proto::Envelope::UNREGISTER_ACTOR_NAME:
      key = request.getUnregisterActorName().initRetryKey();
      break;
    case proto::Envelope::UPDATE_ACTOR_ADDRESS:
      key = request.getUpdateActorAddress().initRetryKey();
      break;
    case proto::Envelope::KV:
      // Only the writes: a query is resent as it is (SafeToResend), and a
      // wait's reply must not be replayed from the head's table.
      if (!IsKvWrite(request.getKv().getOp())) return false;
      key = request.getKv().initRetryKey();
      break;
    case proto::Envelope::REQUEST_LEASE:
      key = request.getRequestLease().initRetryKey();
      break;
    default:
      return false;
  }
  key.setClient(ClientId());
  key.setRequest(next_request.fetch_add(1, std::memory_order_relaxed));
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
