// The built-in codecs: arithmetic types, bool, enums, std::string,
// lumen::Buffer, std::vector, std::array, the std maps and sets, std::pair,
// std::tuple and std::optional, nested in any way. Part of the value codec:
// include "lumen/common/codec.h", which gives the wire format of each.
//
// Stateless: safe to use from any thread.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "lumen/common/buffer.h"
#include "lumen/common/codec_reader.h"
#include "lumen/common/codec_traits.h"
#include "lumen/common/codec_writer.h"

namespace lumen::codec {

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
    // A keepalive that owns something, even with a null stored pointer (a
    // store pin is a deleter on nullptr), makes a view; only none makes a copy.
    b = r.keepalive().use_count() > 0 ? Buffer::View(p, n, r.keepalive()) : Buffer::Copy(p, n);
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

}  // namespace lumen::codec
