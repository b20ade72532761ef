// Byte strings to and from Cap'n Proto Data fields (node ids and group ids
// travel as raw bytes). Stateless; thread-safe.
#pragma once

#include <string>

#include <capnp/common.h>
#include <capnp/blob.h>

namespace lumen::node {

// A copy of `data`'s bytes.
inline std::string Bytes(capnp::Data::Reader data) {
  return std::string(reinterpret_cast<const char*>(data.begin()), data.size());
}

// A view of `s` as Data; `s` must outlive the reader (until it is copied into a message).
inline capnp::Data::Reader DataOfString(const std::string& s) {
  return capnp::Data::Reader(reinterpret_cast<const uint8_t*>(s.data()), s.size());
}

}  // namespace lumen::node
