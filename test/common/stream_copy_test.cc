// lumen::CopyBytes (the store's large-copy routine) and the codec's use of it:
// every byte copied, none written outside the destination, for sizes around
// kStreamCopyBytes and any alignment of source and destination.
#include "lumen/common/stream_copy.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "lumen/common/codec.h"

namespace {

constexpr size_t kGuard = 128;
constexpr uint8_t kSentinel = 0xAB;

std::vector<uint8_t> RandomBytes(size_t n, uint32_t seed) {
  std::vector<uint8_t> out(n);
  std::mt19937_64 rng(seed);
  for (size_t i = 0; i + 8 <= n; i += 8) {
    uint64_t v = rng();
    std::memcpy(out.data() + i, &v, 8);
  }
  for (size_t i = n - n % 8; i < n; ++i) out[i] = static_cast<uint8_t>(rng());
  return out;
}

bool AllSentinel(const uint8_t* begin, const uint8_t* end) {
  return std::all_of(begin, end, [](uint8_t b) { return b == kSentinel; });
}

}  // namespace

TEST_CASE("CopyBytes and StreamCopyBytes copy every byte and nothing outside the destination") {
  const size_t big = lumen::kStreamCopyBytes;
  const std::vector<uint8_t> source = RandomBytes(big + 256, 7);
  std::vector<uint8_t> dest(big + 256 + 2 * kGuard);
  // CopyBytes streams only where that pays (StreamCopyPays: AMD), so the
  // streaming path is checked on its own on every CPU.
  const bool stream = GENERATE(false, true);
  CAPTURE(stream, lumen::StreamCopyPays());
  const auto copy = stream ? lumen::StreamCopyBytes : lumen::CopyBytes;
  for (size_t n : {size_t{0}, size_t{1}, size_t{63}, size_t{4096}, big - 1, big, big + 1, big + 63,
                   big + 127}) {
    for (size_t src_off : {size_t{0}, size_t{7}, size_t{16}}) {
      for (size_t dst_off : {size_t{0}, size_t{1}, size_t{16}, size_t{48}, size_t{63}}) {
        CAPTURE(n, src_off, dst_off);
        std::memset(dest.data(), kSentinel, dest.size());
        uint8_t* d = dest.data() + kGuard + dst_off;
        copy(d, source.data() + src_off, n);
        REQUIRE(std::memcmp(d, source.data() + src_off, n) == 0);
        REQUIRE(AllSentinel(dest.data(), d));
        REQUIRE(AllSentinel(d + n, dest.data() + dest.size()));
      }
    }
  }
}

TEST_CASE("A large array encoded into a fixed buffer equals its encoding into a string") {
  // Over kStreamCopyBytes, so the fixed buffer's copy streams; the source
  // starts at an odd offset from the buffer's 64-byte aligned block.
  const size_t count = lumen::kStreamCopyBytes / sizeof(int64_t) + 5;
  std::vector<int64_t> values(count);
  std::mt19937_64 rng(11);
  for (auto& v : values) v = static_cast<int64_t>(rng());
  const std::string expected = lumen::codec::EncodeValue(values);
  const size_t size = lumen::codec::EncodedValueSize(values);
  REQUIRE(size == expected.size());
  std::vector<uint8_t> buffer(size + 64);
  uint8_t* out = buffer.data() + (64 - reinterpret_cast<uintptr_t>(buffer.data()) % 64) % 64;
  REQUIRE(lumen::codec::EncodeValueInto(out, size, values).ok());
  REQUIRE(std::memcmp(out, expected.data(), size) == 0);
  auto decoded = lumen::codec::DecodeValue<std::vector<int64_t>>(
      std::string_view(reinterpret_cast<const char*>(out), size));
  REQUIRE(decoded.ok());
  REQUIRE(*decoded == values);
}
