// lumen::codec::Writer: the sink encoders write to (a string, a fixed buffer
// such as shared memory, or a byte counter). Part of the value codec: include
// "lumen/common/codec.h", which documents the format.
//
//   std::string out;
//   lumen::codec::Writer w(&out);
//   w.WriteVarint(3);
//   w.WriteBytes("abc", 3);
//
// Not thread-safe: one encoder uses a Writer at a time.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

#include "lumen/common/stream_copy.h"

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
    if (buffer_ != nullptr) {
      // A large array into a fixed buffer (the store): CopyBytes keeps it at
      // memory speed whatever its alignment against the buffer's.
      if (n >= kStreamCopyBytes) {
        CopyBytes(buffer_ + pos_, data, n);
      } else {
        std::memcpy(buffer_ + pos_, data, n);
      }
    }
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

}  // namespace lumen::codec
