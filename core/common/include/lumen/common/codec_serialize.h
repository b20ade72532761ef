// LUMEN_SERIALIZE: a struct lists its fields and gets a codec for free. Part
// of the value codec: include "lumen/common/codec.h".
//
//   struct Sample {
//     std::string name;
//     std::vector<float> values;
//     LUMEN_SERIALIZE(name, values);
//   };
#pragma once

#include <cstddef>
#include <tuple>
#include <type_traits>
#include <utility>

#include "lumen/common/codec_reader.h"
#include "lumen/common/codec_traits.h"
#include "lumen/common/codec_writer.h"

namespace lumen::codec {

// --- User structs (LUMEN_SERIALIZE) ----------------------------------------------

template <class T>
struct Codec<T, std::enable_if_t<internal::LumenSerializable<T>>> {
  static constexpr size_t kMinEncodedSize =
      internal::TupleMinSize<decltype(std::declval<const T&>().LumenTie())>::value;
  static void Encode(Writer& w, const T& v) { v.LumenEncode(w); }
  static void Decode(Reader& r, T& v) { v.LumenDecode(r); }
};

// Inside a struct or class body: encode/decode the listed members, in order.
//
//   struct Sample {
//     std::string name;
//     std::vector<float> values;
//     LUMEN_SERIALIZE(name, values);
//   };
#define LUMEN_SERIALIZE(...)                                                \
  auto LumenTie() { return std::tie(__VA_ARGS__); }                         \
  auto LumenTie() const { return std::tie(__VA_ARGS__); }                   \
  void LumenEncode(::lumen::codec::Writer& lumen_w) const {                 \
    ::lumen::codec::internal::EncodeFields(lumen_w, LumenTie());            \
  }                                                                         \
  void LumenDecode(::lumen::codec::Reader& lumen_r) {                       \
    ::lumen::codec::internal::DecodeFields(lumen_r, LumenTie());            \
  }

}  // namespace lumen::codec
