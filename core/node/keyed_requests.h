// KeyedRequests: a node daemon's memory of the keyed requests it answered
// (doc/reliability.md, item 9): lease requests from drivers and workers
// (LeaseRequest.retryKey) and the head's bundle batches (BundleBatch.retryKey).
// The first time a key is seen the request is dispatched, and the reply later
// sent to it (OnReply) is kept; a repeat of the key (its sender lost the reply
// and sent the request again) gets that reply again, with the repeat's request
// id, and is not dispatched. A repeat arriving while the first is unanswered
// is answered when the first is (on the same connection under the same request
// id: by the first's own reply).
//
//   KeyedRequests keyed;
//   if (keyed.Repeat(conn, msg, /*bound=*/true)) return;   // answered (or will be) here
//   Dispatch(conn, msg);                                   // ... which later replies:
//   keyed.OnReply(conn.id(), msg.getRequestId(), reply);   // kept for repeats, then sent
//
// `bound`: the answer belongs to the connection the first came on (a lease is
// held by its connection and ends when it closes). A repeat on another
// connection is answered from the table only while that one is open; once it
// closed the key is forgotten and the repeat is dispatched anew (the lease the
// first got ended with its connection). Bundle batches are not bound: the
// head's connection changes when its link is reset, the reservation does not.
//
// Bounded: the last `per_client` keys of each client (a process: the key's
// client id) and `clients` clients, the least recently heard from forgotten
// first; a repeat of a forgotten key is dispatched again. Costs: O(1) per
// keyed request and per reply (amortised; forgetting a client scans the
// clients). Only on the node daemon's io thread (checked in debug builds).
#pragma once

#include <capnp/message.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "lumen/common/connection.h"
#include "lumen/common/thread_checker.h"

namespace lumen::node {

class KeyedRequests {
 public:
  struct Limits {
    size_t per_client = 1024;  // above a client's lease requests in flight
    size_t clients = 256;
  };
  KeyedRequests() : KeyedRequests(Limits{}) {}
  explicit KeyedRequests(Limits limits) : limits_(limits) {}
  KeyedRequests(const KeyedRequests&) = delete;
  KeyedRequests& operator=(const KeyedRequests&) = delete;

  // True when `msg` repeats a key seen before: it was answered here (or will
  // be, when the first is) and must not be dispatched. False for a request
  // without a key (RetryKeyOf) or seen for the first time: dispatch it, and
  // pass its reply to OnReply.
  bool Repeat(Connection& conn, proto::Envelope::Reader msg, bool bound);

  // Whether `msg` carries a key remembered now (Repeat would take it as a
  // repeat, unless bound to a closed connection). Changes nothing.
  bool Known(proto::Envelope::Reader msg) const;

  // The reply to request `request_id` on connection `conn_id` is about to be
  // sent: when it answers a keyed request, it is kept for repeats and sent to
  // those waiting. Cheap for any other reply (one lookup).
  void OnReply(uint64_t conn_id, uint64_t request_id, capnp::MessageBuilder& reply);

  // Repeats answered from the table (at once or once the first was answered).
  uint64_t replayed() const { return replayed_; }
  // Keys remembered now.
  size_t size() const;

 private:
  struct Entry {
    bool answered = false;
    kj::Array<capnp::word> reply;  // the reply's message, flat
    bool bound = false;
    std::weak_ptr<Connection> origin;  // where the first came from
    uint64_t origin_conn = 0;          // its id
    uint64_t origin_request = 0;       // the first's request id there
    // Repeats waiting for the first's reply: their connection and request id.
    std::vector<std::pair<std::weak_ptr<Connection>, uint64_t>> waiters;
  };
  struct Client {
    std::deque<uint64_t> order;  // request numbers, oldest first
    absl::flat_hash_map<uint64_t, Entry> entries;
    uint64_t last_used = 0;
  };
  using ConnRequest = std::pair<uint64_t, uint64_t>;  // (connection id, request id)
  using Key = std::pair<uint64_t, uint64_t>;          // (client, request number)

  // Starts remembering `key` for the request `request_id` sent on `conn`.
  void Remember(const Key& key, Connection& conn, uint64_t request_id, bool bound);
  void Forget(Client& client, uint64_t request);
  static void Replay(Connection& conn, const kj::Array<capnp::word>& reply, uint64_t request_id);

  Limits limits_;
  absl::flat_hash_map<uint64_t, Client> clients_;
  absl::flat_hash_map<ConnRequest, Key> unanswered_;  // first requests awaiting their reply
  uint64_t clock_ = 0;
  uint64_t replayed_ = 0;
  ThreadChecker thread_;
};

}  // namespace lumen::node
