// The head's memory of recent retried control requests (doc/reliability.md,
// item 9). A request that carries a retry key (lumen/common/control_retry.h)
// is acted on once: the first time its key is seen it is dispatched and the
// first frame the head then sends on that connection is kept as its reply;
// a repeat of the key (the client lost the reply, or the connection, and sent
// the request again, usually on a new connection) gets that reply again, with
// the repeat's request id, and is not dispatched. A repeat arriving while the
// first is still unanswered is answered when the first is.
//
//   RequestDeduplicator dedup;
//   if (dedup.Repeat(conn, msg)) return;   // answered (or will be) here
//   Dispatch(conn, msg);
//
// Bounded: the last `per_client` keys of each client and `clients` clients
// (the least recently heard from is forgotten first). A repeat of a forgotten
// key is dispatched again, so the bound must exceed what one client has in
// flight and retries within its retry window (kControlAttempts, ~140 ms).
// Costs: O(1) per request (amortised; forgetting a client scans the clients).
// Only on the head's loop thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "lumen/common/connection.h"
#include "lumen/common/thread_checker.h"

namespace lumen::head {

class RequestDeduplicator {
 public:
  struct Limits {
    size_t per_client = 256;
    size_t clients = 4096;
  };
  RequestDeduplicator();  // default Limits
  explicit RequestDeduplicator(Limits limits);
  RequestDeduplicator(const RequestDeduplicator&) = delete;
  RequestDeduplicator& operator=(const RequestDeduplicator&) = delete;

  // True when `request` repeats a key seen before: it was answered here (or
  // will be, when the first is) and must not be dispatched. False for a
  // request without a key or seen for the first time: dispatch it.
  bool Repeat(Connection& conn, proto::Envelope::Reader request);

  // Repeats answered from a stored reply, and repeats that waited for the first.
  uint64_t replayed() const { return table_->replayed; }
  // Keys remembered now.
  size_t size() const;

 private:
  struct Entry {
    bool answered = false;
    std::string reply;  // the reply's frame (header + payload)
    // Repeats waiting for the first's reply: their connection and request id.
    std::vector<std::pair<std::weak_ptr<Connection>, uint64_t>> waiters;
  };
  struct Client {
    std::deque<uint64_t> order;  // request numbers, oldest first
    absl::flat_hash_map<uint64_t, Entry> entries;
    uint64_t last_used = 0;
  };
  // Shared with the send taps of connections, which may outlive the head's
  // dispatch of the request (weak there).
  struct Table {
    Limits limits;
    absl::flat_hash_map<uint64_t, Client> clients;
    uint64_t clock = 0;
    uint64_t replayed = 0;
  };
  static void Answer(Table& table, uint64_t client, uint64_t request, std::string_view frames);
  static void SendReplay(Connection& conn, const std::string& reply, uint64_t request_id);
  void Remember(uint64_t client, uint64_t request);

  std::shared_ptr<Table> table_;
  ThreadChecker thread_;
};

}  // namespace lumen::head
