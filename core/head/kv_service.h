// The head's key-value service: turns kv requests from connections into
// KvStore calls (kv_store.h), parks waits on absent keys with their timers,
// and answers them when the key is put, the timeout passes, or drops them when
// their connection closes.
//
//   KvService kv({.io = &io, .limits = KvLimits::FromEnv(options.kv_limits),
//                 .max_wait = timeouts.max_parked_wait,
//                 .find_connection = [&](uint64_t id) { return FindOpenConnection(id); }});
//   if (kv.Handle(conn, msg)) return;       // a kv request: answered or parked
//   kv.DropConnection(conn.id());           // in the close handler
//
// Only on the head's event loop (checked in debug builds).
#pragma once

#include <boost/asio.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "core/head/head_state_recorder.h"
#include "core/head/kv_store.h"
#include "lumen/common/connection.h"
#include "lumen/common/thread_checker.h"

namespace lumen::head {

class KvService {
 public:
  struct Options {
    boost::asio::io_context* io = nullptr;  // borrowed; runs the wait timers
    KvLimits limits;
    // A wait asking for longer is parked this long (Timeouts::max_parked_wait).
    std::chrono::milliseconds max_wait{24ll * 3600 * 1000};
    // The open connection with that id, or nullptr; called when a parked wait
    // is answered.
    std::function<Connection*(uint64_t)> find_connection;
    // Borrowed; told every put and delete (persistence). nullptr: none.
    HeadStateRecorder* recorder = nullptr;
  };

  explicit KvService(Options options);

  // Handles `msg` if it is a kv request (kv, and the older kvPut/kvGet);
  // returns false for any other message.
  bool Handle(Connection& conn, proto::Envelope::Reader msg);
  // Forgets the parked waits of a closed connection.
  void DropConnection(uint64_t conn_id);
  // Puts an entry of the persisted state back (a restarted head, before it
  // serves); false (logged by the caller) when the store refuses it.
  bool Restore(const std::string& ns, const std::string& key, std::string value);
  const KvStore& store() const { return store_; }

 private:
  static constexpr size_t kMaxKeysPerReply = 100000;

  void OnKv(Connection& conn, uint64_t request_id, proto::KvRequest::Reader req);
  // Answers parked waits whose key was just put.
  void AnswerWaiters(const std::vector<KvStore::Waiter>& woken);
  void AnswerWaiter(const KvStore::Waiter& w, bool found);
  void RecordPut(const std::string& ns, const std::string& key);
  void RecordDelete(const std::string& ns, const std::string& key);
  static void SendError(Connection& conn, uint64_t request_id, const absl::Status& status);

  Options options_;
  KvStore store_;
  // Timers of parked waits, by (connection, request).
  std::map<std::pair<uint64_t, uint64_t>, std::unique_ptr<boost::asio::steady_timer>> timers_;
  ThreadChecker thread_;
};

}  // namespace lumen::head
