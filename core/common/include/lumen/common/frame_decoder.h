// Decoding one frame's payload (a Cap'n Proto flat array) into an Envelope,
// with the limits every daemon applies to what a peer sends:
//
//   absl::Status s = lumen::DecodeFrame(payload, {.nesting_limit = 64},
//                                       [&](lumen::proto::Envelope::Reader env) { ... });
//   if (!s.ok()) close the connection with `s`
//
// Before the handler sees the message it is checked whole (unless
// `walk_whole_message` is false, below), so that a malformed one is refused as
// such however little of it the handler would read:
//  - the segment table: 1..kMaxFrameSegments segments that fit in the payload
//    (Cap'n Proto's flat-array reader allocates a 16-byte entry per declared
//    segment before it checks them, up to 2 per payload word: 16M claimed in a
//    64 MiB frame would be 256 MiB);
//  - every pointer reachable from the root: in bounds, nested at most
//    `nesting_limit` deep, and all of it read within the traversal limit
//    (4 x the payload's words + 1024: cyclic or shared pointers cannot make
//    the walk longer than that);
//  - the Envelope's message type: one this build knows.
// Reads the handler does later are charged to the same traversal limit (so a
// list of Void claiming 2^29 elements fails when it is read).
//
// With `walk_whole_message = false` the segment table and the message type are
// still checked, and every read the handler makes is still bounds-checked,
// nesting-limited and charged to the traversal limit (Cap'n Proto checks each
// pointer as it is followed), so the handler's work and memory stay bounded by
// the frame's size; what is not done is refusing a malformed part the handler
// never reads, and refusing a frame before the handler has acted on its first
// fields. Connection skips the walk only on an authenticated runtime peer's
// hot path (ConnectionOptions::walk_frames_after_hello): a small frame costs
// ~150-200 ns more with it (issue 13).
//
// Pure and thread-safe. Used by Connection for every frame it receives, and by
// the fuzzers in test/fuzz/.
#pragma once

#include <capnp/message.h>

#include <cstddef>
#include <cstdint>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "lumen/proto/lumen.capnp.h"

namespace lumen {

// The most segments a frame's message may have (Cap'n Proto's own stream
// reader refuses 512 and more); our writers use a handful.
inline constexpr uint32_t kMaxFrameSegments = 511;

struct FrameDecodeLimits {
  int nesting_limit = 64;
  // Walk every pointer reachable from the root before the handler runs.
  bool walk_whole_message = true;
};

// The traversal limit for a payload of `words` words.
uint64_t FrameTraversalLimitWords(size_t words);

// Checks the segment table at the start of `payload` (count and sizes).
[[nodiscard]] absl::Status CheckFrameSegments(kj::ArrayPtr<const capnp::word> payload);

// Checks `payload` as described above and calls `handler` with its Envelope.
// InvalidArgument ("malformed message: ...") when a check fails or the handler
// raises a Cap'n Proto decode error or another exception while reading.
[[nodiscard]] absl::Status DecodeFrame(kj::ArrayPtr<const capnp::word> payload, const FrameDecodeLimits& limits,
                         absl::FunctionRef<void(proto::Envelope::Reader)> handler);

}  // namespace lumen
