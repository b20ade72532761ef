// Backoff: when a client that lost its server (the head) tries again, and
// when it gives up. The delays double from `initial` up to `max`; the client
// gives up once `give_up_after` has passed since the loss. One per lost
// connection; Reset once connected again.
//
//   lumen::Backoff backoff({.initial = 100ms, .max = 2s, .give_up_after = 60s});
//   backoff.Start(now);                        // the connection was lost
//   if (backoff.Expired(now)) { /* give up: an error naming the server */ }
//   timer.expires_after(backoff.NextDelay());  // 100, 200, 400, ... 2000, 2000 ms
//   backoff.Reset();                           // connected again
//
// The head's node link (core/node/head_link.h) and the drivers' and workers'
// calls to the head (lumen/common/head_client.h, core/worker/head_requester.h)
// use it, with Timeouts::head_retry_period and head_reconnect_timeout.
//
// No I/O, no clock of its own (time is an argument). Not thread-safe: one owner.
#pragma once

#include <algorithm>
#include <chrono>
#include <optional>

namespace lumen {

class Backoff {
 public:
  using Clock = std::chrono::steady_clock;
  using ms = std::chrono::milliseconds;
  struct Policy {
    ms initial{100};
    ms max{2000};
    ms give_up_after{60000};
  };

  explicit Backoff(Policy policy) : policy_(policy), next_(std::max(ms(1), policy.initial)) {}

  // The connection was lost at `now` (a second call before Reset keeps the
  // first loss's time).
  void Start(Clock::time_point now) {
    if (!lost_at_) lost_at_ = now;
  }
  bool started() const { return lost_at_.has_value(); }
  // True once `give_up_after` has passed since Start.
  bool Expired(Clock::time_point now) const {
    return lost_at_ && now - *lost_at_ >= policy_.give_up_after;
  }
  // How long it has been lost (0 when not started).
  ms Elapsed(Clock::time_point now) const {
    return lost_at_ ? std::chrono::duration_cast<ms>(now - *lost_at_) : ms(0);
  }
  // The delay before the next attempt; each call doubles the next, up to max.
  ms NextDelay() {
    ms delay = next_;
    next_ = std::min(std::max(ms(1), policy_.max), next_ * 2);
    return delay;
  }
  // Connected again: the next loss starts from `initial`.
  void Reset() {
    lost_at_.reset();
    next_ = std::max(ms(1), policy_.initial);
  }
  const Policy& policy() const { return policy_; }

 private:
  Policy policy_;
  ms next_;
  std::optional<Clock::time_point> lost_at_;
};

}  // namespace lumen
