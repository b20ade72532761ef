// Identifiers of the runtime: jobs, nodes, workers, tasks and objects.
//
//   lumen::TaskId task = lumen::TaskId::Random();
//   lumen::ObjectId result = lumen::ObjectId::ForTaskReturn(task, 0);
//   std::string hex = result.Hex();
//
// Every id is a fixed-size byte string; immutable value types, thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <string_view>

namespace lumen {

template <class Tag, size_t N>
class UniqueId {
 public:
  static constexpr size_t kSize = N;

  UniqueId() { bytes_.fill(0); }

  // A random id (thread-safe; uses a per-thread generator seeded from the OS).
  static UniqueId Random();
  // Takes exactly kSize bytes; anything else gives the nil id.
  static UniqueId FromBinary(std::string_view binary) {
    UniqueId id;
    if (binary.size() == N) std::memcpy(id.bytes_.data(), binary.data(), N);
    return id;
  }
  static UniqueId Nil() { return UniqueId(); }
  // Parses 2*kSize hex digits; anything else gives the nil id.
  static UniqueId FromHex(std::string_view hex) {
    UniqueId id;
    if (hex.size() != 2 * N) return id;
    auto digit = [](char c) -> int {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      if (c >= 'A' && c <= 'F') return c - 'A' + 10;
      return -1;
    };
    for (size_t i = 0; i < N; ++i) {
      int hi = digit(hex[2 * i]), lo = digit(hex[2 * i + 1]);
      if (hi < 0 || lo < 0) return UniqueId();
      id.bytes_[i] = static_cast<uint8_t>(hi * 16 + lo);
    }
    return id;
  }

  bool IsNil() const {
    for (uint8_t b : bytes_)
      if (b != 0) return false;
    return true;
  }
  std::string_view Binary() const {
    return std::string_view(reinterpret_cast<const char*>(bytes_.data()), N);
  }
  std::string Hex() const {
    static constexpr char kDigits[] = "0123456789abcdef";
    std::string out(2 * N, '0');
    for (size_t i = 0; i < N; ++i) {
      out[2 * i] = kDigits[bytes_[i] >> 4];
      out[2 * i + 1] = kDigits[bytes_[i] & 15];
    }
    return out;
  }
  const uint8_t* data() const { return bytes_.data(); }
  uint8_t* mutable_data() { return bytes_.data(); }

  friend bool operator==(const UniqueId& a, const UniqueId& b) { return a.bytes_ == b.bytes_; }
  friend bool operator!=(const UniqueId& a, const UniqueId& b) { return !(a == b); }
  friend bool operator<(const UniqueId& a, const UniqueId& b) { return a.bytes_ < b.bytes_; }

  template <typename H>
  friend H AbslHashValue(H h, const UniqueId& id) {
    return H::combine(std::move(h), id.Binary());
  }

 private:
  std::array<uint8_t, N> bytes_;
};

// Fills `out` with random bytes (thread-safe).
void FillRandomBytes(uint8_t* out, size_t n);

template <class Tag, size_t N>
UniqueId<Tag, N> UniqueId<Tag, N>::Random() {
  UniqueId id;
  FillRandomBytes(id.bytes_.data(), N);
  return id;
}

struct JobIdTag {};
struct NodeIdTag {};
struct WorkerIdTag {};
struct TaskIdTag {};
struct ObjectIdTag {};

using JobId = UniqueId<JobIdTag, 8>;
using NodeId = UniqueId<NodeIdTag, 16>;
using WorkerId = UniqueId<WorkerIdTag, 16>;
using TaskId = UniqueId<TaskIdTag, 16>;

// An object is named by the task that creates it plus an index: return values
// use indices 1.., objects created by `Put` use a fresh random task id and index 0.
class ObjectId : public UniqueId<ObjectIdTag, 20> {
 public:
  ObjectId() = default;
  ObjectId(const UniqueId<ObjectIdTag, 20>& id) : UniqueId<ObjectIdTag, 20>(id) {}  // NOLINT

  static ObjectId ForTaskReturn(const TaskId& task, uint32_t index) {
    ObjectId id;
    std::memcpy(id.mutable_data(), task.data(), TaskId::kSize);
    std::memcpy(id.mutable_data() + TaskId::kSize, &index, sizeof(index));
    return id;
  }
  static ObjectId ForPut() { return ForTaskReturn(TaskId::Random(), 0); }
  static ObjectId FromBinary(std::string_view binary) {
    return ObjectId(UniqueId<ObjectIdTag, 20>::FromBinary(binary));
  }
  TaskId Task() const {
    return TaskId::FromBinary(std::string_view(reinterpret_cast<const char*>(data()), TaskId::kSize));
  }
};

}  // namespace lumen

namespace std {
template <class Tag, size_t N>
struct hash<lumen::UniqueId<Tag, N>> {
  size_t operator()(const lumen::UniqueId<Tag, N>& id) const {
    size_t h;
    std::memcpy(&h, id.data(), sizeof(h) < N ? sizeof(h) : N);
    return h;
  }
};
template <>
struct hash<lumen::ObjectId> : hash<lumen::UniqueId<lumen::ObjectIdTag, 20>> {};
}  // namespace std
