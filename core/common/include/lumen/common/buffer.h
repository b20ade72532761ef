// lumen::Buffer: an immutable, cheaply copyable byte buffer.
//
//   lumen::Buffer owned(std::vector<uint8_t>{1, 2, 3});     // takes the bytes
//   lumen::Buffer copy = lumen::Buffer::Copy(ptr, n);        // copies n bytes
//   lumen::Buffer view = lumen::Buffer::View(ptr, n, owner); // no copy; `owner`
//                                                            // keeps ptr alive
//   Process(view.data(), view.size());
//
// Copies share the bytes (reference counted), so passing a Buffer by value is
// O(1). The bytes never change after construction, so concurrent reads from any
// number of threads are safe. The value codec (lumen/common/codec.h) encodes a
// Buffer 64-byte aligned and can decode it as a view into the object store's
// shared memory instead of copying it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace lumen {

class Buffer {
 public:
  // An empty buffer: data() is nullptr and size() is 0.
  Buffer() = default;

  // Takes ownership of `bytes` (no copy of the contents).
  explicit Buffer(std::vector<uint8_t> bytes) {
    auto owned = std::make_shared<const std::vector<uint8_t>>(std::move(bytes));
    data_ = owned->data();
    size_ = owned->size();
    owner_ = std::move(owned);
  }
  explicit Buffer(std::string bytes) {
    auto owned = std::make_shared<const std::string>(std::move(bytes));
    data_ = reinterpret_cast<const uint8_t*>(owned->data());
    size_ = owned->size();
    owner_ = std::move(owned);
  }

  // A buffer owning a copy of `size` bytes at `data`.
  static Buffer Copy(const void* data, size_t size) {
    const auto* p = static_cast<const uint8_t*>(data);
    return Buffer(size == 0 ? std::vector<uint8_t>() : std::vector<uint8_t>(p, p + size));
  }

  // A buffer that refers to `size` bytes at `data` without copying them. The
  // memory must stay valid and unchanged for as long as `keepalive` (which
  // every copy of the buffer holds) is alive.
  static Buffer View(const uint8_t* data, size_t size, std::shared_ptr<const void> keepalive) {
    Buffer b;
    b.data_ = data;
    b.size_ = size;
    b.owner_ = std::move(keepalive);
    return b;
  }

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  std::span<const uint8_t> span() const { return {data_, size_}; }
  std::string_view view() const {
    return {reinterpret_cast<const char*>(data_), size_};
  }

  // Compares contents, not identity.
  friend bool operator==(const Buffer& a, const Buffer& b) {
    return a.size_ == b.size_ &&
           (a.size_ == 0 || a.data_ == b.data_ || std::memcmp(a.data_, b.data_, a.size_) == 0);
  }

 private:
  std::shared_ptr<const void> owner_;  // keeps data_ valid; null only if empty
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace lumen
