// The binary value codec: how task arguments, return values and Put objects
// become bytes and back.
//
//   struct Point {
//     double x = 0, y = 0;
//     std::string label;
//     LUMEN_SERIALIZE(x, y, label);
//   };
//
//   std::string bytes = lumen::codec::EncodeValue(std::vector<Point>{{1, 2, "a"}});
//   absl::StatusOr<std::vector<Point>> points =
//       lumen::codec::DecodeValue<std::vector<Point>>(bytes);
//
//   // Zero-copy read of a big numeric array (the span points into `bytes`):
//   std::string big = lumen::codec::EncodeValue(std::vector<float>(1 << 20));
//   absl::StatusOr<std::span<const float>> view =
//       lumen::codec::DecodeArrayView<float>(big);
//
// Supported out of the box: arithmetic types, bool, enums, std::string,
// std::vector (incl. vector<bool>), std::array, std::map, std::unordered_map,
// std::set, std::unordered_set, std::pair, std::tuple, std::optional,
// lumen::Buffer, any nesting of these, and structs that list their fields with
// LUMEN_SERIALIZE (they must be default-constructible to be decoded). For any
// other type, specialize the codec yourself:
//
//   template <>
//   struct lumen::codec::Codec<MyType> {
//     // Optional: the fewest bytes any MyType encodes to (default 1). Containers
//     // use it to reject implausible element counts before allocating.
//     static constexpr size_t kMinEncodedSize = 4;
//     static void Encode(lumen::codec::Writer& w, const MyType& v) { ... }
//     // Report bad input with r.Fail("..."); never read past the Reader.
//     static void Decode(lumen::codec::Reader& r, MyType& v) { ... }
//   };
//
// Wire format. A top-level value (EncodeValue) is
//   u32 magic 0x564E4D4C ("LMNV" in memory), u8 version 1,
//   varint length + bytes of typeid(T).name(), zero padding to offset 8k, body.
// Bodies: integers and floats are their raw little-endian (host order) bytes;
// bool is one byte 0/1; enums are their underlying type; strings, vectors, maps
// and sets are a LEB128 varint count followed by the elements; optional is a
// 0/1 byte then the value; pair/tuple/array/struct are their fields in order.
// std::vector of a non-bool arithmetic type and lumen::Buffer store, after the
// count, zero padding up to a multiple of 64 bytes (measured from the start of
// the value) and then the raw bytes, so that a value placed at a 64-byte-aligned
// address (as the object store does) can be read in place without copying.
// (The padding is omitted when the count is 0.) All processes run the same
// binary, so type identity is checked by the mangled type name.
//
// Decoding never throws and never reads out of bounds, whatever the input; bad
// input gives absl::InvalidArgumentError, a value of a different type gives
// absl::FailedPreconditionError naming both types.
#pragma once

#include <cstdint>
#include <exception>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <typeinfo>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "lumen/common/buffer.h"
// The parts; users include only this header.
#include "lumen/common/codec_reader.h"     // Reader
#include "lumen/common/codec_serialize.h"  // LUMEN_SERIALIZE
#include "lumen/common/codec_std.h"        // codecs of the standard types and Buffer
#include "lumen/common/codec_traits.h"     // Codec<T>, Encode, Decode, shared helpers
#include "lumen/common/codec_type_name.h"  // Demangle, DemangledTypeName
#include "lumen/common/codec_writer.h"     // Writer

namespace lumen::codec {

// ---------------------------------------------------------------------------
// Top-level values: header + body. This is what the runtime stores and sends.
// ---------------------------------------------------------------------------

inline constexpr uint32_t kValueMagic = 0x564E4D4C;  // "LMNV" little-endian
inline constexpr uint8_t kValueVersion = 1;

namespace internal {

inline void WriteValueHeader(Writer& w, const char* type_name) {
  w.WriteRaw<uint32_t>(kValueMagic);
  w.WriteRaw<uint8_t>(kValueVersion);
  size_t n = std::strlen(type_name);
  w.WriteVarint(n);
  w.WriteBytes(type_name, n);
  w.AlignTo(8);
}

// Reads the header; on success *type_name is the stored mangled name and the
// reader is positioned at the body.
inline absl::Status ReadValueHeader(Reader& r, std::string_view* type_name) {
  uint32_t magic = r.ReadRaw<uint32_t>();
  if (!r.ok()) return absl::InvalidArgumentError(absl::StrCat("not a Lumen value: ", r.status().message()));
  if (magic != kValueMagic) {
    return absl::InvalidArgumentError(
        absl::StrCat("not a Lumen value: bad magic 0x", absl::Hex(magic, absl::kZeroPad8),
                     " (expected 0x", absl::Hex(kValueMagic, absl::kZeroPad8), ")"));
  }
  uint8_t version = r.ReadRaw<uint8_t>();
  if (r.ok() && version != kValueVersion) {
    return absl::InvalidArgumentError(absl::StrCat("unsupported Lumen value version ", version,
                                                   " (this binary reads version ", kValueVersion,
                                                   ")"));
  }
  uint64_t n = r.ReadVarint();
  if (!CheckCount(r, n, 1, "type name")) return r.status();
  const uint8_t* p = r.ReadBytes(n);
  r.AlignTo(8);
  if (!r.ok()) return r.status();
  *type_name = std::string_view(reinterpret_cast<const char*>(p), n);
  return absl::OkStatus();
}

// Demangles a stored name only if it looks like one (the demangler is not
// meant for arbitrary bytes).
inline std::string StoredNameForMessage(std::string_view name) {
  constexpr size_t kMaxLen = 4096;
  bool printable = !name.empty() && name.size() <= kMaxLen;
  for (char c : name) printable = printable && c > ' ' && c < 127;
  if (!printable) return absl::StrCat("<unreadable type name of ", name.size(), " bytes>");
  return Demangle(std::string(name).c_str());
}

inline absl::Status CheckValueHeader(Reader& r, const char* expected) {
  std::string_view stored;
  absl::Status s = ReadValueHeader(r, &stored);
  if (!s.ok()) return s;
  if (stored != expected) {
    return absl::FailedPreconditionError(absl::StrCat("object holds ", StoredNameForMessage(stored),
                                                      " but was read as ", Demangle(expected)));
  }
  return absl::OkStatus();
}

inline absl::Status CheckFullyRead(const Reader& r) {
  if (!r.ok()) return r.status();
  if (r.Remaining() != 0) {
    return absl::InvalidArgumentError(absl::StrCat("corrupt value: ", r.Remaining(),
                                                   " trailing bytes after the value at offset ",
                                                   r.Position(), " of ", r.size()));
  }
  return absl::OkStatus();
}

template <class T>
absl::StatusOr<T> DecodeValueWith(Reader& r) {
  static_assert(std::is_default_constructible_v<T>, "decoded types must be default-constructible");
  absl::Status s = CheckValueHeader(r, typeid(T).name());
  if (!s.ok()) return s;
#if defined(__cpp_exceptions)
  try {
#endif
    T value{};
    codec::Decode(r, value);
    s = CheckFullyRead(r);
    if (!s.ok()) return s;
    return value;
#if defined(__cpp_exceptions)
  } catch (const std::exception& e) {  // e.g. bad_alloc; bounds are checked
    return absl::InvalidArgumentError(absl::StrCat("decoding failed: ", e.what()));
  }
#endif
}

// Shared by DecodeArrayView and DecodeBufferView: header, aligned block, end.
inline absl::StatusOr<std::span<const uint8_t>> DecodeBlockView(std::string_view bytes,
                                                               const char* type_name,
                                                               size_t elem_size,
                                                               size_t elem_align) {
  Reader r(bytes);
  absl::Status s = CheckValueHeader(r, type_name);
  if (!s.ok()) return s;
  uint64_t n = 0;
  const uint8_t* p = ReadAlignedBlock(r, elem_size, &n);
  s = CheckFullyRead(r);
  if (!s.ok()) return s;
  if (p == nullptr) return std::span<const uint8_t>();
  if (reinterpret_cast<uintptr_t>(p) % elem_align != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot view ", Demangle(type_name), " in place: its data at address 0x",
                     absl::Hex(reinterpret_cast<uintptr_t>(p)), " is not ", elem_align,
                     "-byte aligned; place the value at a 64-byte-aligned address"));
  }
  return std::span<const uint8_t>(p, n * elem_size);
}

}  // namespace internal

// Appends the encoding of `value` (header + body) to *out. Alignment is
// measured from where the value begins (out->size() on entry), so to read big
// arrays in place that offset must end up at a 64-byte-aligned address; the
// encoding is self-contained and decodes from exactly that offset.
template <class T>
void EncodeValueTo(std::string* out, const T& value) {
  Writer w(out, out->size());
  internal::WriteValueHeader(w, typeid(T).name());
  Encode(w, value);
}

template <class T>
std::string EncodeValue(const T& value) {
  std::string out;
  EncodeValueTo(&out, value);
  return out;
}

// The number of bytes EncodeValue(value) produces, computed without building
// them (a std::vector<float> of any length is measured in constant time).
template <class T>
size_t EncodedValueSize(const T& value) {
  Writer w = Writer::Measuring();
  internal::WriteValueHeader(w, typeid(T).name());
  Encode(w, value);
  return w.Position();
}

// Writes EncodeValue(value) into [out, out + size), where `size` is
// EncodedValueSize(value) (e.g. straight into a shared-memory object). `out`
// should be 64-byte aligned for big arrays to be readable in place. Fails
// (InternalError) if the value does not encode to exactly `size` bytes.
template <class T>
[[nodiscard]] absl::Status EncodeValueInto(uint8_t* out, size_t size, const T& value) {
  Writer w(out, size);
  internal::WriteValueHeader(w, typeid(T).name());
  Encode(w, value);
  if (w.overflowed() || w.Position() != size) {
    return absl::InternalError(absl::StrCat(
        "encoding ", DemangledTypeName<T>(), " did not produce the ", size,
        " bytes it measured (", w.overflowed() ? "more" : absl::StrCat(w.Position()),
        "): its Codec must write the same bytes every time"));
  }
  return absl::OkStatus();
}

// The encoding of a std::vector<T> (T arithmetic) of `count` elements up to its
// payload: EncodeArrayPrefix<T>(n) followed by the n*sizeof(T) raw bytes equals
// EncodeValue(std::vector<T>) — so a large array can be written straight into
// shared memory with a single copy.
template <class T>
std::string EncodeArrayPrefix(size_t count) {
  static_assert(internal::kIsArithmeticNonBool<T>, "EncodeArrayPrefix needs an arithmetic T");
  std::string out;
  Writer w(&out);
  internal::WriteValueHeader(w, typeid(std::vector<T>).name());
  w.WriteVarint(count);
  if (count > 0) w.AlignTo(64);
  return out;
}

// Decodes a value written by EncodeValue<T>. InvalidArgument for malformed or
// truncated bytes or trailing garbage; FailedPrecondition when the bytes hold
// a different type ("object holds std::vector<int> but was read as std::string").
template <class T>
absl::StatusOr<T> DecodeValue(std::string_view bytes) {
  Reader r(bytes);
  return internal::DecodeValueWith<T>(r);
}

// As above, but every lumen::Buffer inside is a view into `bytes` that holds
// `keepalive` (which must keep `bytes` valid and unchanged) instead of a copy.
// An empty keepalive (one that owns nothing) means copies.
template <class T>
absl::StatusOr<T> DecodeValue(std::string_view bytes, std::shared_ptr<const void> keepalive) {
  Reader r(bytes);
  r.set_keepalive(std::move(keepalive));
  return internal::DecodeValueWith<T>(r);
}

// The readable name of the type an encoded value holds.
inline absl::StatusOr<std::string> StoredTypeName(std::string_view bytes) {
  Reader r(bytes);
  std::string_view name;
  absl::Status s = internal::ReadValueHeader(r, &name);
  if (!s.ok()) return s;
  return internal::StoredNameForMessage(name);
}

// Zero-copy read of a top-level encoded std::vector<T> (T arithmetic, not
// bool): validates the whole value and returns a span into `bytes`. The data
// starts at a multiple of 64 bytes from bytes.data(); FailedPrecondition if
// its address is not aligned for T (the value was not placed at an aligned
// address).
template <class T>
absl::StatusOr<std::span<const T>> DecodeArrayView(std::string_view bytes) {
  static_assert(kIsZeroCopyArray<std::vector<T>>,
                "DecodeArrayView needs a non-bool arithmetic element type");
  absl::StatusOr<std::span<const uint8_t>> raw =
      internal::DecodeBlockView(bytes, typeid(std::vector<T>).name(), sizeof(T), alignof(T));
  if (!raw.ok()) return raw.status();
  if (raw->empty()) return std::span<const T>();
  return std::span<const T>(reinterpret_cast<const T*>(raw->data()), raw->size() / sizeof(T));
}

// Zero-copy read of a top-level encoded lumen::Buffer: a span into `bytes`.
inline absl::StatusOr<std::span<const uint8_t>> DecodeBufferView(std::string_view bytes) {
  return internal::DecodeBlockView(bytes, typeid(Buffer).name(), 1, 1);
}

}  // namespace lumen::codec
