// ParseFrameHeader (declared in lumen/common/connection.h): the frame header
// check, in a file of its own so that the frame fuzzer's minimal build
// (test/fuzz/, lumen_frame_fuzz_core) takes it without the rest of Connection.
#include <cstring>

#include "absl/strings/str_cat.h"
#include "lumen/common/connection.h"

namespace lumen {

absl::StatusOr<size_t> ParseFrameHeader(const uint8_t* header, size_t max_frame_bytes) {
  uint32_t fields[2];
  std::memcpy(fields, header, sizeof(fields));
  if (fields[1] != kFrameMagic) {
    return absl::InvalidArgumentError("bad frame header (not a Lumen peer or corrupt stream)");
  }
  if (fields[0] > max_frame_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat("frame of ", fields[0],
                                                     " bytes exceeds the limit of ",
                                                     max_frame_bytes, " bytes"));
  }
  if (fields[0] == 0 || fields[0] % sizeof(capnp::word) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("frame length ", fields[0], " is not a positive multiple of 8"));
  }
  return static_cast<size_t>(fields[0]);
}

}  // namespace lumen
