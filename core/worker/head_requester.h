// Requests to the head from the io thread, without blocking it: the address is
// resolved and connected asynchronously, and every request ends by a deadline.
//
//   HeadRequester head(io, {.head_address = "10.0.0.1:6379", .deadline = 5s});
//   head.Call([&](proto::Envelope::Builder env) { env.setLookupActorById(...); },
//             [](absl::StatusOr<proto::Envelope::Reader> reply) { ... });
//
// Only on the io thread of `io` (checked in debug builds); callbacks run there.
#pragma once

#include <boost/asio.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "lumen/common/connection.h"
#include "lumen/common/thread_checker.h"

namespace lumen::runtime {

class HeadRequester {
 public:
  struct Options {
    std::string head_address;  // HOST:PORT; empty: every call fails
    std::chrono::milliseconds deadline{5000};  // Timeouts::head_call_timeout
  };
  // The reply is valid only during the callback.
  using ReplyCallback = std::function<void(absl::StatusOr<proto::Envelope::Reader> reply)>;

  // `io` outlives the requester.
  HeadRequester(boost::asio::io_context& io, Options options);
  ~HeadRequester();
  HeadRequester(const HeadRequester&) = delete;
  HeadRequester& operator=(const HeadRequester&) = delete;

  // Sends the request `fill` builds, on a connection of its own per attempt,
  // retried as lumen/common/control_retry.h says (one retry key for every
  // attempt; faults from LUMEN_FAULT_INJECT drawn per attempt). `done` runs
  // once: with the head's reply, or FailedPrecondition (no head address),
  // Unavailable (unreachable, closed; after retrying through a head restart
  // as GetHeadReconnect() says), DeadlineExceeded, Cancelled (CancelAll).
  void Call(std::function<void(proto::Envelope::Builder)> fill, ReplyCallback done);
  // `done` runs once no call is in flight (at once when none is).
  void WhenIdle(std::function<void()> done);
  // Ends every call in flight with Cancelled.
  void CancelAll();

 private:
  struct Pending;
  // The call `id` if `attempt` is its current attempt, else nullptr (a
  // handler of an earlier attempt).
  Pending* Current(uint64_t id, int attempt);
  void StartAttempt(uint64_t id);
  void OnConnected(uint64_t id, int attempt);
  // An attempt failed: the next one after a pause, when attempts are left and
  // resending is safe (control_retry.h), else the call ends with `why`.
  void Failed(uint64_t id, int attempt, absl::Status why, bool sent);
  // Ends an attempt's resolver, socket and connection (freed on a later turn).
  void Release(Pending& p);
  void Finish(uint64_t id, absl::StatusOr<proto::Envelope::Reader> reply);

  boost::asio::io_context& io_;
  Options options_;
  ThreadChecker io_thread_;
  uint64_t next_id_ = 1;
  absl::flat_hash_map<uint64_t, std::unique_ptr<Pending>> pending_;
  std::vector<std::function<void()>> idle_waiters_;
};

}  // namespace lumen::runtime
