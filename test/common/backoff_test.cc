// lumen::Backoff on its own: the delays of a client reconnecting to a lost
// head, and when it gives up (time is an argument: no sleeping).
#include "lumen/common/backoff.h"

#include <catch2/catch.hpp>

using lumen::Backoff;
using ms = std::chrono::milliseconds;

TEST_CASE("Backoff doubles its delay up to the cap and gives up after the deadline") {
  // Invariant: delays go initial, 2x, 4x, ... capped at max; Expired is false
  // before give_up_after has passed since the first loss and true from then
  // on; Reset starts over from initial and forgets the loss.
  Backoff backoff({.initial = ms(100), .max = ms(500), .give_up_after = ms(2000)});
  const auto t0 = Backoff::Clock::now();
  CHECK_FALSE(backoff.started());
  CHECK_FALSE(backoff.Expired(t0 + ms(5000)));  // nothing lost yet
  backoff.Start(t0);
  backoff.Start(t0 + ms(1000));  // a second loss keeps the first one's time
  CHECK(backoff.NextDelay() == ms(100));
  CHECK(backoff.NextDelay() == ms(200));
  CHECK(backoff.NextDelay() == ms(400));
  CHECK(backoff.NextDelay() == ms(500));
  CHECK(backoff.NextDelay() == ms(500));
  CHECK_FALSE(backoff.Expired(t0 + ms(1999)));
  CHECK(backoff.Expired(t0 + ms(2000)));
  CHECK(backoff.Elapsed(t0 + ms(1500)) == ms(1500));
  backoff.Reset();
  CHECK_FALSE(backoff.started());
  CHECK_FALSE(backoff.Expired(t0 + ms(10000)));
  CHECK(backoff.NextDelay() == ms(100));
}
