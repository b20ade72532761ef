// FaultInjector (lumen/common/fault_injector.h) and the retry rules of
// control_retry.h, on their own (no processes, no sockets).
#include "lumen/common/fault_injector.h"

#include <capnp/message.h>

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "lumen/common/control_retry.h"

namespace {

using lumen::FaultInjector;
using lumen::InjectedFault;

std::vector<InjectedFault> Draws(const std::string& message, int n) {
  std::vector<InjectedFault> out;
  for (int i = 0; i < n; ++i) out.push_back(FaultInjector::Draw(message));
  return out;
}

}  // namespace

TEST_CASE("fault rules: modes, message names, probability, cap and seed", "[fault]") {
  // Invariant: a rule fires only for its message (case-insensitive, or "*"),
  // never more than its cap, at its probability; the same seed gives the same
  // sequence; a malformed spec is refused and changes nothing.
  REQUIRE(FaultInjector::Configure("createPlacementGroup:drop_reply:1:2", 1).ok());
  CHECK(FaultInjector::Active());
  CHECK(FaultInjector::Draw("kv") == InjectedFault::kNone);
  CHECK(Draws("CREATEPLACEMENTGROUP", 4) ==
        std::vector<InjectedFault>{InjectedFault::kDropReply, InjectedFault::kDropReply,
                                   InjectedFault::kNone, InjectedFault::kNone});
  CHECK(FaultInjector::Fired() == 2);
  CHECK(FaultInjector::Fired("createPlacementGroup") == 2);
  CHECK(FaultInjector::Fired("kv") == 0);

  REQUIRE(FaultInjector::Configure("*:fail_before_send:0,kv:fail_in_flight:1", 1).ok());
  CHECK(FaultInjector::Draw("registerActorName") == InjectedFault::kNone);
  CHECK(FaultInjector::Draw("kv") == InjectedFault::kFailInFlight);

  REQUIRE(FaultInjector::Configure("kv:drop_reply:0.5", 42).ok());
  auto first = Draws("kv", 200);
  REQUIRE(FaultInjector::Configure("kv:drop_reply:0.5", 42).ok());
  CHECK(Draws("kv", 200) == first);
  auto fired = std::count(first.begin(), first.end(), InjectedFault::kDropReply);
  CHECK(fired > 60);
  CHECK(fired < 140);

  CHECK_FALSE(FaultInjector::Configure("kv:explode:1", 1).ok());
  CHECK_FALSE(FaultInjector::Configure("kv:drop_reply:1.5", 1).ok());
  CHECK_FALSE(FaultInjector::Configure("kv:drop_reply", 1).ok());
  CHECK_FALSE(FaultInjector::Configure("kv:drop_reply:1:x", 1).ok());
  CHECK(FaultInjector::Draw("kv") == InjectedFault::kDropReply);  // the last good rules stay
  REQUIRE(FaultInjector::Configure("", 1).ok());
  CHECK_FALSE(FaultInjector::Active());
  CHECK(FaultInjector::Draw("kv") == InjectedFault::kNone);
}

TEST_CASE("retry keys: set where the message has a place, the same on every attempt", "[fault]") {
  // Invariant: a keyed request keeps its key across attempts (only the attempt
  // number changes); two requests get different keys; unkeyed requests are
  // resent only when they change nothing.
  capnp::MallocMessageBuilder a, b, c;
  auto create = a.initRoot<lumen::proto::Envelope>();
  create.initCreatePlacementGroup().setName("g");
  REQUIRE(lumen::SetRetryKey(create));
  auto key = lumen::RetryKeyOf(create.asReader());
  REQUIRE(key.has_value());
  lumen::SetRetryAttempt(create, 3);
  auto again = lumen::RetryKeyOf(create.asReader());
  CHECK(again->client == key->client);
  CHECK(again->request == key->request);
  CHECK(again->attempt == 3);
  CHECK(FaultInjector::MessageName(create.asReader()) == "createPlacementGroup");
  CHECK(lumen::SafeToResend(create.asReader()));

  auto name = b.initRoot<lumen::proto::Envelope>();
  name.initRegisterActorName().setName("n");
  REQUIRE(lumen::SetRetryKey(name));
  CHECK(lumen::RetryKeyOf(name.asReader())->request != key->request);

  // Key-value writes are keyed (item 9); reads are not, and are resent as
  // they are; an unkeyed write is not resent.
  auto kv = c.initRoot<lumen::proto::Envelope>();
  kv.initKv().setOp(lumen::proto::KvOp::PUT);
  CHECK_FALSE(lumen::SafeToResend(kv.asReader()));
  REQUIRE(lumen::SetRetryKey(kv));
  CHECK(lumen::SafeToResend(kv.asReader()));
  lumen::SetRetryAttempt(kv, 2);
  CHECK(lumen::RetryKeyOf(kv.asReader())->attempt == 2);
  capnp::MallocMessageBuilder d, e;
  auto del = d.initRoot<lumen::proto::Envelope>();
  del.initKv().setOp(lumen::proto::KvOp::DELETE_PREFIX);
  CHECK(lumen::SetRetryKey(del));
  auto get = e.initRoot<lumen::proto::Envelope>();
  get.initKv().setOp(lumen::proto::KvOp::GET);
  CHECK_FALSE(lumen::SetRetryKey(get));
  CHECK_FALSE(lumen::RetryKeyOf(get.asReader()).has_value());
  CHECK(lumen::SafeToResend(get.asReader()));
  get.getKv().setOp(lumen::proto::KvOp::WAIT);
  CHECK_FALSE(lumen::SetRetryKey(get));
}
