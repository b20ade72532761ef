#include "lumen/common/frame_decoder.h"

#include <capnp/any.h>
#include <capnp/schema.h>
#include <capnp/serialize.h>
#include <kj/exception.h>

#include <cstring>
#include <exception>

#include "absl/strings/str_cat.h"

namespace lumen {
namespace {

// How many message types (union members) this build's Envelope has.
uint16_t KnownMessageTypes() {
  static const uint16_t count = static_cast<uint16_t>(
      capnp::Schema::from<proto::Envelope>().getUnionFields().size());
  return count;
}

}  // namespace

uint64_t FrameTraversalLimitWords(size_t words) { return uint64_t{words} * 4 + 1024; }

absl::Status CheckFrameSegments(kj::ArrayPtr<const capnp::word> payload) {
  if (payload.size() == 0) return absl::InvalidArgumentError("malformed message: empty");
  uint32_t first;
  std::memcpy(&first, payload.begin(), sizeof(first));
  // The table holds the count minus one: 0xFFFFFFFF would wrap to 0 segments.
  uint64_t segments = uint64_t{first} + 1;
  if (segments > kMaxFrameSegments) {
    return absl::InvalidArgumentError(absl::StrCat("malformed message: ", segments,
                                                   " segments (at most ", kMaxFrameSegments, ")"));
  }
  // The table: a u32 count, a u32 size per segment, padded to a whole word.
  uint64_t table_words = segments / 2 + 1;
  if (table_words > payload.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("malformed message: its segment table of ", segments,
                     " segments ends past the frame"));
  }
  uint64_t total = table_words;
  const auto* bytes = reinterpret_cast<const uint8_t*>(payload.begin());
  for (uint64_t i = 0; i < segments; ++i) {
    uint32_t size;
    std::memcpy(&size, bytes + 4 + 4 * i, sizeof(size));
    total += size;
  }
  if (total > payload.size()) {
    return absl::InvalidArgumentError(absl::StrCat("malformed message: its segments need ", total,
                                                   " words, the frame has ", payload.size()));
  }
  return absl::OkStatus();
}

absl::Status DecodeFrame(kj::ArrayPtr<const capnp::word> payload, const FrameDecodeLimits& limits,
                         absl::FunctionRef<void(proto::Envelope::Reader)> handler) {
  if (absl::Status s = CheckFrameSegments(payload); !s.ok()) return s;
  try {
    capnp::ReaderOptions options;
    options.traversalLimitInWords = FrameTraversalLimitWords(payload.size());
    options.nestingLimit = limits.nesting_limit;
    capnp::FlatArrayMessageReader reader(payload, options);
    // The whole message, once: bounds, nesting and the traversal limit.
    if (limits.walk_whole_message) reader.getRoot<capnp::AnyPointer>().targetSize();
    proto::Envelope::Reader envelope = reader.getRoot<proto::Envelope>();
    auto type = static_cast<uint16_t>(envelope.which());
    if (type >= KnownMessageTypes()) {
      return absl::InvalidArgumentError(
          absl::StrCat("malformed message: unknown message type ", type));
    }
    handler(envelope);
  } catch (const kj::Exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("malformed message: ", e.getDescription().cStr()));
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("bad message: ", e.what()));
  }
  return absl::OkStatus();
}

}  // namespace lumen
