// StoreRepeats: a node store's memory of the keyed requests it answered
// (doc/reliability.md, item 9). A driver or worker that lost the answer to a
// storeCreate, storeSeal, storeAbort or storeGet sends the same request again
// on the same connection with the same RetryKey (StoreRequest.retryKey;
// core/worker/store_provider.cc); the StoreServer answers that repeat with the
// answer it kept instead of acting again: one allocation per create, one pin
// per get, one seal.
//
//   StoreKey key = StoreKeyOf(caller.client, msg.getStoreGet());
//   if (key.resend) if (const StoreReply* kept = repeats.Find(key)) return reply(*kept);
//   ... act ..., then repeats.Record(key, answer); reply(answer);
//
// Kept per connection (a store client's pins, unsealed objects and parked
// requests are its connection's, and go with it: Forget), the last
// `per_client` answers of each, oldest overwritten first; a repeat of a key no
// longer kept is acted on anew (a create or seal is then refused as a second
// one: the store's state stays right, the caller gets the error; a get takes
// a second pin, held until the connection closes). Clients key their requests
// only while fault injection is on (the only way an answer is lost on a live
// connection), so without it the table stays empty. A repeat is
// sent only after its first's answer was read (and thrown away), so no repeat
// meets an unanswered first. Costs per keyed request: one hash lookup and one
// copy of the answer (no allocation once a connection has `per_client`
// answers); a first attempt (key.resend false) is never looked up; a repeat
// scans its connection's answers, newest first. Only on the node daemon's io
// thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "lumen/objectstore/object_table.h"
#include "lumen/objectstore/store_region.h"
#include "lumen/proto/lumen.capnp.h"

namespace lumen::objectstore {

// A store request's key as the store keeps it.
struct StoreKey {
  bool keyed = false;   // the request carries a key
  bool resend = false;  // and it is not its first attempt (RetryKey.attempt > 0)
  ClientId conn = 0;    // the connection it came on
  uint64_t client = 0;  // RetryKey.client (the sending process)
  uint64_t request = 0;  // RetryKey.request
};

// The key of a store request that came on connection `conn` (keyed false
// when it carries none).
inline StoreKey StoreKeyOf(ClientId conn, proto::StoreRequest::Reader request) {
  if (!request.hasRetryKey()) return StoreKey{};
  auto key = request.getRetryKey();
  return StoreKey{.keyed = true,
                  .resend = key.getAttempt() > 0,
                  .conn = conn,
                  .client = key.getClient(),
                  .request = key.getRequest()};
}

class StoreRepeats {
 public:
  using Answer = absl::StatusOr<StoreRegion>;  // StoreServer's StoreReply
  struct Limits {
    size_t per_client = 256;  // above a client's store requests in flight
  };
  StoreRepeats() : StoreRepeats(Limits{}) {}
  explicit StoreRepeats(Limits limits) : limits_(limits) {}
  StoreRepeats(const StoreRepeats&) = delete;
  StoreRepeats& operator=(const StoreRepeats&) = delete;

  // The answer kept for `key` (a repeat: counted as replayed), or null when
  // none is kept (never seen, or forgotten). For a key without `keyed`: null.
  const Answer* Find(const StoreKey& key);
  // Keeps `answer` for `key` (no-op without `keyed`).
  void Record(const StoreKey& key, const Answer& answer);
  // Connection `conn` closed: its answers go.
  void Forget(ClientId conn) { clients_.erase(conn); }

  // Repeats answered from the table.
  uint64_t replayed() const { return replayed_; }
  // Answers kept now, over all connections.
  size_t size() const;

 private:
  struct Entry {
    uint64_t client = 0;
    uint64_t request = 0;
    Answer answer;
  };
  struct Ring {
    std::vector<Entry> entries;  // grows to per_client, then overwritten oldest first
    size_t next = 0;             // where the next answer goes once full
  };

  Limits limits_;
  absl::flat_hash_map<ClientId, Ring> clients_;
  uint64_t replayed_ = 0;
};

}  // namespace lumen::objectstore
