// Retrying control requests to the head (doc/reliability.md, item 9). A
// request is sent again when an attempt failed before it was written (always
// safe), or when its reply was lost after it was written, if that is safe:
// the request carries a retry key (the head de-duplicates by key and replays
// the reply it stored, so the side effect happens once) or it changes nothing
// (a query, a wait, a removal). Other requests whose reply is lost fail with
// Unavailable saying the head may or may not have acted.
//
//   capnp::MallocMessageBuilder out;
//   auto env = out.initRoot<proto::Envelope>();
//   env.initCreatePlacementGroup() ...;
//   SetRetryKey(env);                      // same key on every attempt
//   for (int attempt = 0; attempt < kControlAttempts; ++attempt) { ... }
//
// Used by CallHead (head_client.cc) and HeadRequester (core/worker). Thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>

#include "lumen/proto/lumen.capnp.h"

namespace lumen {

// Attempts per control request, in all.
inline constexpr int kControlAttempts = 4;
// The pause before attempt `attempt` (1-based retries): 20 ms, 40 ms, 80 ms.
std::chrono::milliseconds ControlRetryBackoff(int attempt);

// Gives `request` a fresh key (this process's client id, its next request
// number) when its message has a place for one: createPlacementGroup,
// registerActorName, unregisterActorName, updateActorAddress, the key-value
// writes (kv put, delete, deletePrefix), requestLease (to a node daemon,
// which de-duplicates it: core/node/keyed_requests.h), and the store requests
// that answer: storeCreate, storeSeal, storeAbort, storeGet (de-duplicated by
// the node's store: objectstore/store_repeats.h). Returns whether it did.
// Bundle batches (head -> node) carry a key too, set by the head from its
// ticket (RetryClientId(), ticket), so that a resend keeps it.
bool SetRetryKey(proto::Envelope::Builder request);
// This process's client id in the keys it sets (random, never 0).
uint64_t RetryClientId();
// Records the attempt number in the key (no-op without a key).
void SetRetryAttempt(proto::Envelope::Builder request, uint32_t attempt);

struct RetryKeyValue {
  uint64_t client = 0;
  uint64_t request = 0;
  uint32_t attempt = 0;
};
// A fresh key: this process's client id and its next request number (for a
// sender that builds each attempt anew: StoreProvider).
RetryKeyValue NewRetryKey();
// Sets `key` as `request`'s key (a resend built anew keeps its first key);
// false, and no change, where its message has no place for one.
bool SetRetryKey(proto::Envelope::Builder request, const RetryKeyValue& key);
// The key of `request`, when it carries one.
std::optional<RetryKeyValue> RetryKeyOf(proto::Envelope::Reader request);

// Whether `request` may be sent again after its reply was lost (see above).
bool SafeToResend(proto::Envelope::Reader request);

}  // namespace lumen
