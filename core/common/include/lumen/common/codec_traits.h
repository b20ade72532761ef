// lumen::codec::Codec<T>, the extension point of the value codec, with
// codec::Encode/Decode and the helpers codecs share (element-count checks,
// aligned raw blocks, minimum encoded sizes). Part of the value codec: include
// "lumen/common/codec.h", which shows how to specialize Codec<T>.
//
//   lumen::codec::Encode(writer, value);   // static_assert if T has no codec
//   lumen::codec::Decode(reader, value);   // errors go to the Reader
//
// Stateless: everything here is safe to call from any thread.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <tuple>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "lumen/common/codec_reader.h"
#include "lumen/common/codec_writer.h"

namespace lumen::codec {

// ---------------------------------------------------------------------------
// Codec<T>: how one type is encoded. Specialize it for your own types (see the
// top of lumen/common/codec.h) or use LUMEN_SERIALIZE.
// ---------------------------------------------------------------------------
template <class T, class Enable = void>
struct Codec;

namespace internal {
template <class T>
concept HasCodec = requires(Writer& w, Reader& r, const T& c, T& m) {
  Codec<T>::Encode(w, c);
  Codec<T>::Decode(r, m);
};
}  // namespace internal

template <class T>
void Encode(Writer& w, const T& value) {
  static_assert(internal::HasCodec<T>,
                "no lumen::codec::Codec<T> for this type: add LUMEN_SERIALIZE(fields...) to it "
                "or specialize lumen::codec::Codec<T> (see lumen/common/codec.h)");
  Codec<T>::Encode(w, value);
}

// Decodes into `value`; errors go to the Reader (check r.ok()). Does nothing
// once the Reader has failed.
template <class T>
void Decode(Reader& r, T& value) {
  static_assert(internal::HasCodec<T>,
                "no lumen::codec::Codec<T> for this type: add LUMEN_SERIALIZE(fields...) to it "
                "or specialize lumen::codec::Codec<T> (see lumen/common/codec.h)");
  if (!r.ok()) return;
  Codec<T>::Decode(r, value);
}

namespace internal {

template <class T>
inline constexpr bool kIsArithmeticNonBool =
    std::is_arithmetic_v<T> && !std::is_same_v<std::remove_cv_t<T>, bool>;

// True for structs that use LUMEN_SERIALIZE.
template <class T>
concept LumenSerializable = requires(const T& c, T& m, Writer& w, Reader& r) {
  c.LumenEncode(w);
  m.LumenDecode(r);
  c.LumenTie();
};

template <class T>
constexpr size_t MinEncodedSizeOf() {
  if constexpr (requires { Codec<T>::kMinEncodedSize; }) {
    return Codec<T>::kMinEncodedSize;
  } else {
    return 1;
  }
}

template <class Tuple>
struct TupleMinSize;
template <class... Ts>
struct TupleMinSize<std::tuple<Ts...>> {
  static constexpr size_t value = (size_t{0} + ... + MinEncodedSizeOf<std::remove_cvref_t<Ts>>());
};

// Fails the reader unless `count` elements of at least `min_size` bytes each
// fit in what is left; done before allocating anything for them.
inline bool CheckCount(Reader& r, uint64_t count, size_t min_size, const char* what) {
  if (!r.ok()) return false;
  if (min_size == 0) min_size = 1;
  if (count > r.Remaining() / min_size) {
    r.Fail(absl::StrCat("corrupt value: ", what, " of ", count, " elements (at least ", min_size,
                        " bytes each) at offset ", r.Position(), " but only ", r.Remaining(),
                        " bytes remain"));
    return false;
  }
  return true;
}

// Elements to reserve up front: never more than ~16 MiB worth, whatever the
// (already plausibility-checked) count says; the container grows past that.
template <class T>
size_t ReserveCount(uint64_t count) {
  constexpr uint64_t kMax = std::max<uint64_t>(1, (uint64_t{16} << 20) / sizeof(T));
  return static_cast<size_t>(std::min(count, kMax));
}

template <class Elem>
constexpr void CheckElementSize() {
  static_assert(MinEncodedSizeOf<Elem>() > 0,
                "container elements must encode to at least one byte (e.g. not std::tuple<>)");
}

template <class... Ts>
void EncodeFields(Writer& w, const std::tuple<Ts...>& fields) {
  std::apply([&](const auto&... f) { (Encode(w, f), ...); }, fields);
}
template <class... Ts>
void DecodeFields(Reader& r, const std::tuple<Ts&...>& fields) {
  std::apply([&](auto&... f) { (Decode(r, f), ...); }, fields);
}

// Shared by vector<arithmetic> and Buffer: count, align 64, raw bytes.
inline void WriteAlignedBlock(Writer& w, const void* data, size_t count, size_t elem_size) {
  w.WriteVarint(count);
  if (count == 0) return;
  w.AlignTo(64);
  w.WriteBytes(data, count * elem_size);
}
// Returns the start of the block (nullptr on failure) and its element count.
inline const uint8_t* ReadAlignedBlock(Reader& r, size_t elem_size, uint64_t* count) {
  *count = r.ReadVarint();
  if (!r.ok() || *count == 0) return nullptr;
  r.AlignTo(64);
  if (!r.ok()) return nullptr;
  if (*count > r.Remaining() / elem_size) {
    r.Fail(absl::StrCat("truncated value: array of ", *count, " elements of ", elem_size,
                        " bytes at offset ", r.Position(), " but only ", r.Remaining(),
                        " bytes remain"));
    return nullptr;
  }
  return r.ReadBytes(*count * elem_size);
}

}  // namespace internal

// The fewest bytes any value of T encodes to.
template <class T>
inline constexpr size_t kMinEncodedSize = internal::MinEncodedSizeOf<T>();

// True for the types stored as one 64-byte-aligned raw array, which
// DecodeArrayView can read in place: std::vector of a non-bool arithmetic type.
template <class T>
inline constexpr bool kIsZeroCopyArray = false;
template <class T>
inline constexpr bool kIsZeroCopyArray<std::vector<T>> = internal::kIsArithmeticNonBool<T>;

}  // namespace lumen::codec
