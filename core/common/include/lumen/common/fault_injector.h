// Fault injection for control requests (doc/reliability.md, item 9), set from
// the environment of any Lumen process:
//
//   LUMEN_FAULT_INJECT="createPlacementGroup:drop_reply:0.5,registerActorName:fail_in_flight:1:2"
//   LUMEN_FAULT_SEED=42          (default: a fresh seed, logged at the first draw)
//
// A rule is MESSAGE:MODE:PROBABILITY[:MAX]. MESSAGE is the name of the request
// in the Envelope union (lumen.capnp: "kv", "createPlacementGroup",
// "registerActorName", ...; case-insensitive, "*" for any). MODE is
//   fail_before_send  the attempt fails before a byte is written;
//   fail_in_flight    the request is written, then the connection is dropped
//                     before the reply is read (the head may or may not act);
//   drop_reply        the head's reply is read and thrown away (it acted).
// MAX caps how many times the rule fires in this process (default: no cap).
// The clients that consult it are the ones that retry: CallHead
// (lumen/common/head_client.h) and HeadRequester (core/worker); each attempt
// draws once (InjectedFault::kNone when no rule fires). On the serving side,
// a node daemon's HeadLink draws once per bundle batch the head sends
// (prepareBundles, commitBundles, cancelBundles; not for a resend it answers
// from its table): fail_before_send drops the link without acting, the other
// two act and drop the link instead of replying (core/node/head_link.h).
// A driver's or worker's StoreProvider (core/worker/store_provider.h) draws
// once per attempt of storeCreate, storeSeal, storeAbort, storeGet and
// pullObject: fail_before_send sends it again at once, the other two throw
// its node's answer away (the connection is kept: its loss would be the
// node's) and send it again with the same key.
//
// Cost when LUMEN_FAULT_INJECT is unset: Active() is one load of a cached flag.
// Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "lumen/proto/lumen.capnp.h"

namespace lumen {

enum class InjectedFault { kNone, kFailBeforeSend, kFailInFlight, kDropReply };

class FaultInjector {
 public:
  // Whether any rule is configured (from the environment at start-up, or Configure).
  static bool Active() { return active_.load(std::memory_order_relaxed); }
  // The fault for this attempt of `request` (a rule matching its Envelope
  // union member's name). kNone when inactive.
  static InjectedFault Draw(proto::Envelope::Reader request);
  static InjectedFault Draw(std::string_view message);
  // Replaces the rules (for tests in one process; "" turns injection off).
  // InvalidArgument, and no change, for a malformed spec.
  static absl::Status Configure(std::string_view spec, uint64_t seed);
  // How many faults fired in this process since start or the last Configure.
  static uint64_t Fired();
  // How many faults the rules naming `message` fired (case-insensitive).
  static uint64_t Fired(std::string_view message);
  // "fail_before_send" etc.; "none".
  static const char* Name(InjectedFault fault);
  // The Envelope union member's name of `request` ("kv", "createPlacementGroup").
  static std::string MessageName(proto::Envelope::Reader request);

 private:
  static std::atomic<bool> active_;
};

}  // namespace lumen
