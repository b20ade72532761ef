// libFuzzer target: the frame header and frame decoder (lumen/common/frame_decoder.h),
// as Connection applies them to what a peer sends. The input is a byte stream
// of frames; each is parsed (ParseFrameHeader with the daemons' 64 MiB limit),
// decoded (DecodeFrame: segment table, bounds, nesting, traversal limit, message
// type) and, when accepted, walked whole through the schema (every field of
// every struct read, as the pretty printer does). Each frame is decoded twice:
// with the whole-message walk (what the daemons do) and without it (a worker's
// or driver's connection after the hello), where only the handler's reads are
// checked. Must never crash, leak, hang or hit undefined behaviour; refusals
// are fine.
#include <capnp/dynamic.h>
#include <capnp/pretty-print.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "lumen/common/connection.h"
#include "lumen/common/frame_decoder.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  constexpr size_t kMaxFrameBytes = 64u << 20;  // ConnectionOptions' default
  std::vector<capnp::word> payload;
  while (size >= lumen::kFrameHeaderBytes) {
    auto len = lumen::ParseFrameHeader(data, kMaxFrameBytes);
    if (!len.ok()) return 0;
    data += lumen::kFrameHeaderBytes;
    size -= lumen::kFrameHeaderBytes;
    if (*len > size) return 0;  // truncated: a connection would wait for more
    // Copied into words: the connection's read buffer is word-aligned too.
    payload.resize(*len / sizeof(capnp::word));
    std::memcpy(payload.data(), data, *len);
    data += *len;
    size -= *len;
    for (bool walk : {true, false}) {
      absl::Status s = lumen::DecodeFrame(
          kj::arrayPtr(payload.data(), payload.size()),
          {.nesting_limit = 64, .walk_whole_message = walk},
          [](lumen::proto::Envelope::Reader envelope) {
            // Throws kj::Exception on what the checks let through but a reader
            // refuses (DecodeFrame turns that into a status, as for a handler).
            kj::String text = capnp::prettyPrint(envelope).flatten();
            (void)text;
          });
      (void)s;
    }
  }
  return 0;
}
