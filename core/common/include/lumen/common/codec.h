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

#include <cxxabi.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <typeinfo>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "lumen/common/buffer.h"

namespace lumen::codec {

// ---------------------------------------------------------------------------
// Writer: where encoded bytes go. Three kinds: appending to a string it does not
// own; writing into a fixed buffer (e.g. straight into shared memory); or only
// measuring, so that a large value's size is known before anything is allocated
// for it. Codecs write the same way to all three; an Encode must write the same
// bytes every time it is called for the same value (a value may be encoded once
// to measure it and once more to write it), and should do nothing else when
// measuring() (e.g. ObjectRef pins its object only when really written).
// ---------------------------------------------------------------------------
class Writer {
 public:
  // Appends to *out. Position() and AlignTo() are measured from byte `origin`
  // of *out (by default the start of the string), which must be where the
  // encoded value begins for its alignment to hold when it is read back.
  explicit Writer(std::string* out, size_t origin = 0) : out_(out), origin_(origin) {}

  // Writes into [data, data + capacity); alignment is measured from `data`.
  // Writing past the end writes nothing more and sets overflowed().
  Writer(uint8_t* data, size_t capacity) : buffer_(data), capacity_(capacity) {}

  // Counts the bytes an encoding takes without writing them.
  static Writer Measuring() { return Writer(); }

  bool measuring() const { return out_ == nullptr && buffer_ == nullptr; }
  // A fixed buffer was too small (so the value is incomplete).
  bool overflowed() const { return overflowed_; }

  void WriteBytes(const void* data, size_t n) {
    if (n == 0) return;
    if (out_ != nullptr) {
      out_->append(static_cast<const char*>(data), n);
      return;
    }
    if (buffer_ != nullptr && !Fits(n)) return;
    if (buffer_ != nullptr) std::memcpy(buffer_ + pos_, data, n);
    pos_ += n;
  }

  // The raw bytes of a trivially copyable value, in host byte order.
  template <class T>
  void WriteRaw(const T& value) {
    static_assert(std::is_trivially_copyable_v<T>, "WriteRaw needs a trivially copyable type");
    WriteBytes(&value, sizeof(T));
  }

  // Unsigned LEB128: 7 bits a byte, low bits first, at most 10 bytes.
  void WriteVarint(uint64_t value) {
    uint8_t buf[10];
    size_t n = 0;
    while (value >= 0x80) {
      buf[n++] = static_cast<uint8_t>(value) | 0x80;
      value >>= 7;
    }
    buf[n++] = static_cast<uint8_t>(value);
    WriteBytes(buf, n);
  }

  // Bytes written since the origin.
  size_t Position() const { return out_ != nullptr ? out_->size() - origin_ : pos_; }

  // Appends zero bytes until Position() is a multiple of `alignment`.
  void AlignTo(size_t alignment) {
    if (alignment <= 1) return;
    size_t pad = (alignment - Position() % alignment) % alignment;
    if (pad == 0) return;
    if (out_ != nullptr) {
      out_->append(pad, '\0');
      return;
    }
    if (buffer_ != nullptr && !Fits(pad)) return;
    if (buffer_ != nullptr) std::memset(buffer_ + pos_, 0, pad);
    pos_ += pad;
  }

  // The string appended to, or nullptr for a buffer or measuring writer.
  std::string* output() const { return out_; }

 private:
  Writer() = default;
  bool Fits(size_t n) {
    if (!overflowed_ && n <= capacity_ - pos_) return true;
    overflowed_ = true;
    pos_ = capacity_;
    return false;
  }

  std::string* out_ = nullptr;
  size_t origin_ = 0;
  uint8_t* buffer_ = nullptr;
  size_t capacity_ = 0;
  size_t pos_ = 0;  // buffer and measuring writers
  bool overflowed_ = false;
};

// ---------------------------------------------------------------------------
// Reader: a bounds-checked cursor over bytes it does not own.
//
// Failure is sticky: after the first failed read (or Fail()), ok() is false,
// status() describes the first problem, and every further read returns zeros,
// an empty result or nullptr, so decoders can read a whole structure and check
// ok() once at the end.
// ---------------------------------------------------------------------------
class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  explicit Reader(std::string_view bytes)
      : Reader(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()) {}

  bool ok() const { return ok_; }
  absl::Status status() const {
    return ok_ ? absl::OkStatus() : absl::InvalidArgumentError(error_);
  }

  // Records a failure (only the first one is kept) and stops all reading.
  void Fail(std::string message) {
    if (!ok_) return;
    ok_ = false;
    error_ = std::move(message);
  }

  // Returns a pointer to the next n bytes and advances past them, or nullptr
  // on failure. When n is 0 the pointer may be nullptr too: check ok().
  const uint8_t* ReadBytes(size_t n) {
    if (!ok_) return nullptr;
    if (n > size_ - pos_) {
      Fail(absl::StrCat("truncated value: needed ", n, " bytes at offset ", pos_, " of ", size_));
      return nullptr;
    }
    const uint8_t* p = data_ + pos_;
    pos_ += n;
    return p;
  }

  // A trivially copyable value from its raw host-order bytes; T{} on failure.
  template <class T>
  T ReadRaw() {
    static_assert(std::is_trivially_copyable_v<T>, "ReadRaw needs a trivially copyable type");
    static_assert(std::is_default_constructible_v<T>, "ReadRaw needs a default-constructible type");
    T value{};
    const uint8_t* p = ReadBytes(sizeof(T));
    if (p != nullptr) std::memcpy(&value, p, sizeof(T));
    return value;
  }

  // Unsigned LEB128; fails on more than 10 bytes or a value over 64 bits.
  uint64_t ReadVarint() {
    uint64_t value = 0;
    const size_t start = pos_;
    for (int i = 0; i < 10; ++i) {
      if (!ok_) return 0;
      if (pos_ >= size_) {
        Fail(absl::StrCat("truncated value: varint at offset ", start, " runs past the end (",
                          size_, " bytes)"));
        return 0;
      }
      uint8_t byte = data_[pos_++];
      if (i == 9 && byte > 1) {
        Fail(absl::StrCat("corrupt value: varint at offset ", start, " overflows 64 bits"));
        return 0;
      }
      value |= static_cast<uint64_t>(byte & 0x7f) << (7 * i);
      if ((byte & 0x80) == 0) return value;
    }
    Fail(absl::StrCat("corrupt value: varint at offset ", start, " is longer than 10 bytes"));
    return 0;
  }

  // Skips the zero padding the Writer added to reach a multiple of `alignment`
  // (nonzero padding is rejected, so every value has one encoding).
  void AlignTo(size_t alignment) {
    if (!ok_ || alignment <= 1) return;
    size_t pad = (alignment - pos_ % alignment) % alignment;
    const uint8_t* p = ReadBytes(pad);
    for (size_t i = 0; p != nullptr && i < pad; ++i) {
      if (p[i] != 0) {
        Fail(absl::StrCat("corrupt value: nonzero alignment padding at offset ", pos_ - pad + i));
        return;
      }
    }
  }

  size_t Position() const { return pos_; }
  size_t Remaining() const { return ok_ ? size_ - pos_ : 0; }
  size_t size() const { return size_; }
  const uint8_t* data() const { return data_; }

  // When set, lumen::Buffer values are decoded as views into the input that
  // hold this pointer, instead of copies. The caller guarantees the input stays
  // valid while the keepalive lives.
  void set_keepalive(std::shared_ptr<const void> keepalive) { keepalive_ = std::move(keepalive); }
  const std::shared_ptr<const void>& keepalive() const { return keepalive_; }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
  bool ok_ = true;
  std::string error_;
  std::shared_ptr<const void> keepalive_;
};

// ---------------------------------------------------------------------------
// Codec<T>: how one type is encoded. Specialize it for your own types (see the
// top of this file) or use LUMEN_SERIALIZE.
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

// --- Scalars ---------------------------------------------------------------

template <class T>
struct Codec<T, std::enable_if_t<internal::kIsArithmeticNonBool<T>>> {
  static constexpr size_t kMinEncodedSize = sizeof(T);
  static void Encode(Writer& w, const T& v) { w.WriteRaw(v); }
  static void Decode(Reader& r, T& v) { v = r.ReadRaw<T>(); }
};

template <>
struct Codec<bool> {
  static constexpr size_t kMinEncodedSize = 1;
  static void Encode(Writer& w, const bool& v) { w.WriteRaw<uint8_t>(v ? 1 : 0); }
  static void Decode(Reader& r, bool& v) {
    size_t at = r.Position();
    uint8_t b = r.ReadRaw<uint8_t>();
    if (b > 1) r.Fail(absl::StrCat("corrupt value: bool byte ", b, " at offset ", at));
    v = b == 1;
  }
};

template <class T>
struct Codec<T, std::enable_if_t<std::is_enum_v<T>>> {
  using U = std::underlying_type_t<T>;
  static constexpr size_t kMinEncodedSize = internal::MinEncodedSizeOf<U>();
  static void Encode(Writer& w, const T& v) { codec::Encode(w, static_cast<U>(v)); }
  static void Decode(Reader& r, T& v) {
    U u{};
    codec::Decode(r, u);
    v = static_cast<T>(u);
  }
};

// --- Strings and buffers ---------------------------------------------------

template <>
struct Codec<std::string> {
  static constexpr size_t kMinEncodedSize = 1;
  static void Encode(Writer& w, const std::string& s) {
    w.WriteVarint(s.size());
    w.WriteBytes(s.data(), s.size());
  }
  static void Decode(Reader& r, std::string& s) {
    s.clear();
    uint64_t n = r.ReadVarint();
    if (!internal::CheckCount(r, n, 1, "string")) return;
    const uint8_t* p = r.ReadBytes(n);
    if (p != nullptr) s.assign(reinterpret_cast<const char*>(p), n);
  }
};

template <>
struct Codec<Buffer> {
  static constexpr size_t kMinEncodedSize = 1;
  static void Encode(Writer& w, const Buffer& b) {
    internal::WriteAlignedBlock(w, b.data(), b.size(), 1);
  }
  static void Decode(Reader& r, Buffer& b) {
    b = Buffer();
    uint64_t n = 0;
    const uint8_t* p = internal::ReadAlignedBlock(r, 1, &n);
    if (p == nullptr || !r.ok()) return;
    b = r.keepalive() ? Buffer::View(p, n, r.keepalive()) : Buffer::Copy(p, n);
  }
};

// --- Sequences ---------------------------------------------------------------

template <class T, class A>
struct Codec<std::vector<T, A>> {
  static constexpr size_t kMinEncodedSize = 1;
  static void Encode(Writer& w, const std::vector<T, A>& v) {
    if constexpr (internal::kIsArithmeticNonBool<T>) {
      internal::WriteAlignedBlock(w, v.data(), v.size(), sizeof(T));
    } else {
      w.WriteVarint(v.size());
      for (const auto& e : v) codec::Encode(w, static_cast<const T&>(e));
    }
  }
  static void Decode(Reader& r, std::vector<T, A>& v) {
    v.clear();
    if constexpr (internal::kIsArithmeticNonBool<T>) {
      uint64_t n = 0;
      const uint8_t* p = internal::ReadAlignedBlock(r, sizeof(T), &n);
      if (p == nullptr || !r.ok()) return;
      v.resize(n);
      std::memcpy(v.data(), p, n * sizeof(T));
    } else if constexpr (std::is_same_v<T, bool>) {
      uint64_t n = r.ReadVarint();
      if (!internal::CheckCount(r, n, 1, "vector<bool>")) return;
      v.reserve(n);
      for (uint64_t i = 0; i < n && r.ok(); ++i) {
        bool b = false;
        codec::Decode(r, b);
        v.push_back(b);
      }
    } else {
      internal::CheckElementSize<T>();
      uint64_t n = r.ReadVarint();
      if (!internal::CheckCount(r, n, internal::MinEncodedSizeOf<T>(), "vector")) return;
      v.reserve(internal::ReserveCount<T>(n));
      for (uint64_t i = 0; i < n && r.ok(); ++i) codec::Decode(r, v.emplace_back());
    }
  }
};

template <class T, size_t N>
struct Codec<std::array<T, N>> {
  static constexpr size_t kMinEncodedSize = N * internal::MinEncodedSizeOf<T>();
  static void Encode(Writer& w, const std::array<T, N>& a) {
    if constexpr (internal::kIsArithmeticNonBool<T>) {
      w.WriteBytes(a.data(), sizeof(T) * N);
    } else {
      for (const auto& e : a) codec::Encode(w, e);
    }
  }
  static void Decode(Reader& r, std::array<T, N>& a) {
    if constexpr (internal::kIsArithmeticNonBool<T>) {
      const uint8_t* p = r.ReadBytes(sizeof(T) * N);
      if (p != nullptr && N > 0) std::memcpy(a.data(), p, sizeof(T) * N);
    } else {
      for (auto& e : a) codec::Decode(r, e);
    }
  }
};

// --- Associative containers --------------------------------------------------

namespace internal {

template <class M>
struct MapCodec {
  using K = typename M::key_type;
  using V = typename M::mapped_type;
  static constexpr size_t kMinEncodedSize = 1;
  static void Encode(Writer& w, const M& m) {
    w.WriteVarint(m.size());
    for (const auto& [k, v] : m) {
      codec::Encode(w, k);
      codec::Encode(w, v);
    }
  }
  static void Decode(Reader& r, M& m) {
    m.clear();
    CheckElementSize<std::pair<K, V>>();
    uint64_t n = r.ReadVarint();
    if (!CheckCount(r, n, MinEncodedSizeOf<K>() + MinEncodedSizeOf<V>(), "map")) return;
    for (uint64_t i = 0; i < n && r.ok(); ++i) {
      K k{};
      V v{};
      size_t at = r.Position();
      codec::Decode(r, k);
      codec::Decode(r, v);
      if (!r.ok()) return;
      if (!m.emplace(std::move(k), std::move(v)).second) {
        r.Fail(absl::StrCat("corrupt value: duplicate map key at offset ", at));
      }
    }
  }
};

template <class S>
struct SetCodec {
  using K = typename S::key_type;
  static constexpr size_t kMinEncodedSize = 1;
  static void Encode(Writer& w, const S& s) {
    w.WriteVarint(s.size());
    for (const auto& k : s) codec::Encode(w, k);
  }
  static void Decode(Reader& r, S& s) {
    s.clear();
    CheckElementSize<K>();
    uint64_t n = r.ReadVarint();
    if (!CheckCount(r, n, MinEncodedSizeOf<K>(), "set")) return;
    for (uint64_t i = 0; i < n && r.ok(); ++i) {
      K k{};
      size_t at = r.Position();
      codec::Decode(r, k);
      if (!r.ok()) return;
      if (!s.insert(std::move(k)).second) {
        r.Fail(absl::StrCat("corrupt value: duplicate set element at offset ", at));
      }
    }
  }
};

}  // namespace internal

template <class K, class V, class C, class A>
struct Codec<std::map<K, V, C, A>> : internal::MapCodec<std::map<K, V, C, A>> {};
template <class K, class V, class H, class E, class A>
struct Codec<std::unordered_map<K, V, H, E, A>>
    : internal::MapCodec<std::unordered_map<K, V, H, E, A>> {};
template <class K, class C, class A>
struct Codec<std::set<K, C, A>> : internal::SetCodec<std::set<K, C, A>> {};
template <class K, class H, class E, class A>
struct Codec<std::unordered_set<K, H, E, A>> : internal::SetCodec<std::unordered_set<K, H, E, A>> {
};

// --- Products and optionals ----------------------------------------------------

template <class A, class B>
struct Codec<std::pair<A, B>> {
  static constexpr size_t kMinEncodedSize =
      internal::MinEncodedSizeOf<A>() + internal::MinEncodedSizeOf<B>();
  static void Encode(Writer& w, const std::pair<A, B>& p) {
    codec::Encode(w, p.first);
    codec::Encode(w, p.second);
  }
  static void Decode(Reader& r, std::pair<A, B>& p) {
    codec::Decode(r, p.first);
    codec::Decode(r, p.second);
  }
};

template <class... Ts>
struct Codec<std::tuple<Ts...>> {
  static constexpr size_t kMinEncodedSize = internal::TupleMinSize<std::tuple<Ts...>>::value;
  static void Encode(Writer& w, const std::tuple<Ts...>& t) { internal::EncodeFields(w, t); }
  static void Decode(Reader& r, std::tuple<Ts...>& t) {
    std::apply([&](auto&... f) { (codec::Decode(r, f), ...); }, t);
  }
};

template <class T>
struct Codec<std::optional<T>> {
  static constexpr size_t kMinEncodedSize = 1;
  static void Encode(Writer& w, const std::optional<T>& o) {
    w.WriteRaw<uint8_t>(o.has_value() ? 1 : 0);
    if (o.has_value()) codec::Encode(w, *o);
  }
  static void Decode(Reader& r, std::optional<T>& o) {
    o.reset();
    size_t at = r.Position();
    uint8_t tag = r.ReadRaw<uint8_t>();
    if (!r.ok()) return;
    if (tag > 1) {
      r.Fail(absl::StrCat("corrupt value: optional tag ", tag, " at offset ", at));
    } else if (tag == 1) {
      codec::Decode(r, o.emplace());
    }
  }
};

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

// ---------------------------------------------------------------------------
// Type names.
// ---------------------------------------------------------------------------

// A readable name for a mangled (typeid) name: demangled, with default
// template arguments (std::allocator, std::less, std::hash, std::equal_to,
// std::char_traits) dropped and std::basic_string<char> shown as std::string,
// e.g. "std::map<std::string, std::vector<int>>". Best effort, for messages;
// returns the input unchanged if it cannot be demangled.
inline std::string Demangle(const char* mangled) {
  if (mangled == nullptr) return "";
  if (*mangled == '*') ++mangled;  // GCC marks names of internal-linkage types
  int status = 0;
  char* raw = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  if (status != 0 || raw == nullptr) {
    std::free(raw);
    return mangled;
  }
  std::string s(raw);
  std::free(raw);

  auto replace_all = [&s](std::string_view from, std::string_view to) {
    for (size_t pos = s.find(from); pos != std::string::npos; pos = s.find(from, pos + to.size())) {
      s.replace(pos, from.size(), to);
    }
  };
  replace_all("std::__cxx11::", "std::");
  for (std::string_view arg : {", std::char_traits<", ", std::allocator<", ", std::less<",
                               ", std::hash<", ", std::equal_to<"}) {
    size_t search = 0;
    while (true) {
      size_t pos = s.find(arg, search);
      if (pos == std::string::npos) break;
      size_t i = pos + arg.size();
      int depth = 1;
      for (; i < s.size() && depth > 0; ++i) {
        if (s[i] == '<') ++depth;
        if (s[i] == '>') --depth;
      }
      if (depth != 0) break;
      // Only a trailing (defaulted) argument: what follows must close the list.
      size_t next = s.find_first_not_of(' ', i);
      if (next == std::string::npos || (s[next] != '>' && s[next] != ',')) {
        search = pos + 1;
        continue;
      }
      s.erase(pos, i - pos);
      search = pos;
    }
  }
  replace_all(" >", ">");
  replace_all("std::basic_string<char>", "std::string");
  return s;
}

template <class T>
std::string DemangledTypeName() {
  return Demangle(typeid(T).name());
}

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
absl::Status EncodeValueInto(uint8_t* out, size_t size, const T& value) {
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
// A null keepalive means copies.
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
