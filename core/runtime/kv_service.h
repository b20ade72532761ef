// The head's key-value service: turns kv requests from connections into
// KvStore calls (kv_store.h), parks waits on absent keys with their timers,
// and answers them when the key is put, the timeout passes, or drops them when
// their connection closes.
//
//   KvService kv(io, KvLimits::FromEnv(options.kv_limits),
//                [&](uint64_t id) { return FindOpenConnection(id); });
//   if (kv.Handle(conn, msg)) return;       // a kv request: answered or parked
//   kv.DropConnection(conn.id());           // in the close handler
//
// Only on the head's event loop (not thread-safe).
#pragma once

#include <boost/asio.hpp>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "core/runtime/kv_store.h"
#include "lumen/common/connection.h"

namespace lumen::runtime {

class KvService {
 public:
  // `find_connection` returns the open connection with that id, or nullptr;
  // it is called when a parked wait is answered.
  KvService(boost::asio::io_context& io, KvLimits limits,
            std::function<Connection*(uint64_t)> find_connection);

  // Handles `msg` if it is a kv request (kv, and the older kvPut/kvGet);
  // returns false for any other message.
  bool Handle(Connection& conn, proto::Envelope::Reader msg);
  // Forgets the parked waits of a closed connection.
  void DropConnection(uint64_t conn_id);

 private:
  static constexpr size_t kMaxKeysPerReply = 100000;
  static constexpr uint64_t kMaxWaitMs = 24ull * 3600 * 1000;

  void OnKv(Connection& conn, uint64_t request_id, proto::KvRequest::Reader req);
  // Answers parked waits whose key was just put.
  void AnswerWaiters(const std::vector<KvStore::Waiter>& woken);
  void AnswerWaiter(const KvStore::Waiter& w, bool found);
  static void SendError(Connection& conn, uint64_t request_id, const absl::Status& status);

  boost::asio::io_context& io_;
  KvStore store_;
  std::function<Connection*(uint64_t)> find_connection_;
  // Timers of parked waits, by (connection, request).
  std::map<std::pair<uint64_t, uint64_t>, std::unique_ptr<boost::asio::steady_timer>> timers_;
};

}  // namespace lumen::runtime
