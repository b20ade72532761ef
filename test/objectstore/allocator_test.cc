#include "lumen/objectstore/allocator.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <random>
#include <vector>

#include <catch2/catch.hpp>

namespace lumen::objectstore {
namespace {

TEST_CASE("Allocator starts empty and rounds sizes up to the alignment", "[allocator]") {
  Allocator a(1024, 64);
  CHECK(a.capacity() == 1024);
  CHECK(a.used() == 0);
  CHECK(a.largest_free_block() == 1024);
  CHECK(a.num_allocations() == 0);

  auto x = a.Allocate(1);
  REQUIRE(x);
  CHECK(*x == 0);
  CHECK(a.used() == 64);
  auto zero = a.Allocate(0);
  REQUIRE(zero);
  CHECK(*zero == 64);
  CHECK(a.AllocationSize(*zero) == 64);
  auto y = a.Allocate(65);
  REQUIRE(y);
  CHECK(*y == 128);
  CHECK(a.AllocationSize(*y) == 128);
  CHECK(a.used() == 256);
  CHECK(a.num_allocations() == 3);
  CHECK(a.largest_free_block() == 1024 - 256);
}

TEST_CASE("Allocator rounds capacity down to the alignment", "[allocator]") {
  Allocator a(1000, 64);
  CHECK(a.capacity() == 960);
  CHECK(a.Allocate(960));
  CHECK_FALSE(a.Allocate(0));
}

TEST_CASE("Allocator fills up and returns nullopt when exhausted", "[allocator]") {
  Allocator a(64 * 16);
  std::vector<uint64_t> offsets;
  for (int i = 0; i < 16; ++i) {
    auto o = a.Allocate(64);
    REQUIRE(o);
    CHECK(*o == 64u * i);
    offsets.push_back(*o);
  }
  CHECK_FALSE(a.Allocate(1));
  CHECK_FALSE(a.Allocate(0));
  CHECK(a.largest_free_block() == 0);
  CHECK(a.used() == a.capacity());
  // Too big from the start, including sizes whose rounding would overflow.
  Allocator b(4096);
  CHECK_FALSE(b.Allocate(4097));
  CHECK_FALSE(b.Allocate(UINT64_MAX));
  CHECK_FALSE(b.Allocate(UINT64_MAX - 10));

  // Free every other block: 8 holes of 64, nothing bigger fits.
  for (int i = 0; i < 16; i += 2) a.Free(offsets[i]);
  CHECK(a.largest_free_block() == 64);
  CHECK_FALSE(a.Allocate(65));
  CHECK(a.Allocate(64) == 0u);  // Lowest hole first.
}

TEST_CASE("Allocator coalesces three neighbours freed in any order", "[allocator]") {
  std::vector<int> order = {0, 1, 2};
  do {
    Allocator a(3 * 256);
    uint64_t blocks[3];
    for (auto& b : blocks) {
      auto o = a.Allocate(256);
      REQUIRE(o);
      b = *o;
    }
    REQUIRE_FALSE(a.Allocate(1));
    INFO("free order " << order[0] << order[1] << order[2]);
    for (int i : order) a.Free(blocks[i]);
    CHECK(a.used() == 0);
    CHECK(a.num_allocations() == 0);
    CHECK(a.largest_free_block() == a.capacity());
    auto all = a.Allocate(a.capacity());
    REQUIRE(all);
    CHECK(*all == 0);
  } while (std::next_permutation(order.begin(), order.end()));
}

TEST_CASE("Allocator coalesces with the free tail and a free head", "[allocator]") {
  Allocator a(4096);
  auto x = a.Allocate(1024);
  auto y = a.Allocate(1024);
  REQUIRE(x);
  REQUIRE(y);
  a.Free(*y);  // Merges with the free tail [2048, 4096).
  CHECK(a.largest_free_block() == 3072);
  a.Free(*x);  // Merges with [1024, 4096).
  CHECK(a.largest_free_block() == 4096);
}

TEST_CASE("Allocator picks the best fit lowest offset on ties", "[allocator]") {
  Allocator a(64 * 100);
  // Layout: [A 4][B 1][C 2][D 1][E 2][F 1][rest free].
  uint64_t sizes[] = {4, 1, 2, 1, 2, 1};
  std::vector<uint64_t> off;
  for (uint64_t s : sizes) off.push_back(*a.Allocate(64 * s));
  a.Free(off[0]);  // hole of 4 at 0
  a.Free(off[2]);  // hole of 2 at 5*64
  a.Free(off[4]);  // hole of 2 at 8*64
  // Best fit for 2 units: the lower of the two holes of 2.
  CHECK(a.Allocate(128) == off[2]);
  CHECK(a.Allocate(128) == off[4]);
  // 1 unit: the only hole left below the tail is the one of 4, at 0.
  CHECK(a.Allocate(1) == 0u);
}

TEST_CASE("Allocator returns aligned offsets for odd sizes and alignments", "[allocator]") {
  for (uint64_t alignment : {1u, 8u, 64u, 4096u}) {
    Allocator a(1 << 20, alignment);
    std::mt19937_64 rng(alignment);
    std::vector<uint64_t> live;
    for (int i = 0; i < 200; ++i) {
      auto o = a.Allocate(rng() % 3000);
      if (!o) break;
      INFO("alignment " << alignment << " offset " << *o);
      CHECK(*o % alignment == 0);
      live.push_back(*o);
      if (i % 3 == 0) {
        a.Free(live[live.size() / 2]);
        live.erase(live.begin() + live.size() / 2);
      }
    }
  }
}

TEST_CASE("Allocator randomised against a model", "[allocator]") {
  const uint64_t seed = std::random_device{}();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  const uint64_t kAlign = 64;
  const uint64_t kCapacity = 1 << 20;
  Allocator a(kCapacity, kAlign);
  std::map<uint64_t, uint64_t> live;  // offset -> rounded size
  uint64_t model_used = 0;

  for (int step = 0; step < 20000; ++step) {
    const bool allocate = live.empty() || rng() % 100 < 55;
    if (allocate) {
      // Mostly small objects, some large ones.
      uint64_t size = rng() % 10 == 0 ? rng() % (kCapacity / 4) : rng() % 5000;
      uint64_t rounded = std::max<uint64_t>(kAlign, (size + kAlign - 1) / kAlign * kAlign);
      const uint64_t largest = a.largest_free_block();
      auto o = a.Allocate(size);
      INFO("step " << step << " size " << size);
      if (!o) {
        REQUIRE(rounded > largest);
        continue;
      }
      REQUIRE(rounded <= largest);
      REQUIRE(*o % kAlign == 0);
      REQUIRE(*o + rounded <= kCapacity);
      // No overlap with the neighbours in the model.
      auto next = live.lower_bound(*o);
      if (next != live.end()) REQUIRE(*o + rounded <= next->first);
      if (next != live.begin()) {
        auto prev = std::prev(next);
        REQUIRE(prev->first + prev->second <= *o);
      }
      live.emplace(*o, rounded);
      model_used += rounded;
    } else {
      auto it = live.begin();
      std::advance(it, rng() % live.size());
      a.Free(it->first);
      model_used -= it->second;
      live.erase(it);
    }
    REQUIRE(a.used() == model_used);
    REQUIRE(a.num_allocations() == live.size());
  }
  // Freeing everything coalesces back into one block.
  for (const auto& [offset, size] : live) a.Free(offset);
  CHECK(a.used() == 0);
  CHECK(a.largest_free_block() == kCapacity);
}

#ifdef NDEBUG
TEST_CASE("Allocator ignores frees of unknown offsets in release builds", "[allocator]") {
  Allocator a(4096);
  auto x = a.Allocate(64);
  REQUIRE(x);
  a.Free(*x + 64);
  a.Free(*x);
  a.Free(*x);  // Double free.
  CHECK(a.used() == 0);
  CHECK(a.largest_free_block() == 4096);
}
#endif

}  // namespace
}  // namespace lumen::objectstore
