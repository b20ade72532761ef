// lumen::codec::Reader: the bounds-checked cursor decoders read from. Part of
// the value codec: include "lumen/common/codec.h", which documents the format.
//
//   lumen::codec::Reader r(bytes.data(), bytes.size());
//   uint64_t n = r.ReadVarint();
//   const uint8_t* p = r.ReadBytes(n);   // nullptr once anything failed
//   if (!r.ok()) return r.status();
//
// Not thread-safe: one decoder uses a Reader at a time.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace lumen::codec {

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

}  // namespace lumen::codec
