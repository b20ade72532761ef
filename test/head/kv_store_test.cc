// KvStore (the head's key-value table) on its own: no sockets, no processes.
#include "core/head/kv_store.h"

#include <catch2/catch.hpp>
#include <cstdlib>
#include <string>

using lumen::head::KvLimits;
using lumen::head::KvStore;

namespace {

KvLimits SmallLimits() {
  KvLimits limits;
  limits.max_key_bytes = 16;
  limits.max_value_bytes = 100;
  limits.max_namespace_bytes = 1000;
  limits.max_total_bytes = 1500;
  limits.max_waiters_per_connection = 2;
  limits.max_waiters = 4;
  return limits;
}

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("kv store: put, get, overwrite flag, delete, namespaces are apart") {
  KvStore store(SmallLimits());
  auto put = store.Put("a", "k", "v1", true);
  REQUIRE(put.ok());
  CHECK(put->written);
  REQUIRE(store.Get("a", "k") != nullptr);
  CHECK(*store.Get("a", "k") == "v1");
  CHECK(store.Get("b", "k") == nullptr);  // another namespace
  CHECK(store.Get("", "k") == nullptr);

  auto keep = store.Put("a", "k", "v2", /*overwrite=*/false);
  REQUIRE(keep.ok());
  CHECK_FALSE(keep->written);
  CHECK(*store.Get("a", "k") == "v1");
  REQUIRE(store.Put("a", "k", "v3", true).ok());
  CHECK(*store.Get("a", "k") == "v3");

  CHECK(store.Delete("a", "k") == 1);
  CHECK(store.Delete("a", "k") == 0);
  CHECK(store.Get("a", "k") == nullptr);
  CHECK(store.namespace_bytes("a") == 0);
  CHECK(store.total_bytes() == 0);
}

TEST_CASE("kv store: prefix delete and key listing touch only the prefix") {
  KvStore store(SmallLimits());
  for (const char* k : {"g1/a", "g1/b", "g10/a", "g2/a", "h"}) REQUIRE(store.Put("n", k, "x", true).ok());
  CHECK(store.Keys("n", "g1/", 10) == std::vector<std::string>{"g1/a", "g1/b"});
  CHECK(store.Keys("n", "g", 2).size() == 2);  // capped
  CHECK(store.DeletePrefix("n", "g1/") == 2);
  CHECK(store.Keys("n", "", 10) == std::vector<std::string>{"g10/a", "g2/a", "h"});
  CHECK(store.DeletePrefix("n", "") == 3);
  CHECK(store.total_bytes() == 0);
}

TEST_CASE("kv store: each limit refuses with a text naming it and changes nothing") {
  KvStore store(SmallLimits());
  auto big = store.Put("n", "k", std::string(101, 'x'), true);
  REQUIRE(big.status().code() == absl::StatusCode::kResourceExhausted);
  CHECK(big.status().message() ==
        "value of 101 bytes exceeds the key-value limit of 100 bytes (LUMEN_KV_MAX_VALUE_BYTES)");
  CHECK(store.total_bytes() == 0);

  auto long_key = store.Put("n", std::string(17, 'k'), "v", true);
  REQUIRE(long_key.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(Contains(std::string(long_key.status().message()), "LUMEN_KV_MAX_KEY_BYTES"));
  CHECK(store.Put("n", "", "v", true).status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(store.Put(std::string(17, 'n'), "k", "v", true).status().code() ==
        absl::StatusCode::kInvalidArgument);

  // Each entry costs key + value + 64: "k0".."k5" with 100-byte values are 166 each.
  for (int i = 0; i < 6; ++i) REQUIRE(store.Put("n", "k" + std::to_string(i), std::string(100, 'v'), true).ok());
  CHECK(store.namespace_bytes("n") == 6 * 166);
  auto full = store.Put("n", "k6", std::string(100, 'v'), true);
  REQUIRE(full.status().code() == absl::StatusCode::kResourceExhausted);
  CHECK(full.status().message() ==
        "namespace 'n' would hold 1162 bytes, over the key-value limit of 1000 bytes per "
        "namespace (LUMEN_KV_MAX_NAMESPACE_BYTES)");
  CHECK(store.Get("n", "k6") == nullptr);
  // Overwriting with a value no larger still works in a full namespace.
  CHECK(store.Put("n", "k0", "small", true).ok());

  // The total over all namespaces: 1500 bytes.
  for (int i = 0; i < 3; ++i) REQUIRE(store.Put("m", "k" + std::to_string(i), std::string(100, 'v'), true).ok());
  auto total = store.Put("m", "k3", std::string(100, 'v'), true);
  REQUIRE(total.status().code() == absl::StatusCode::kResourceExhausted);
  CHECK(Contains(std::string(total.status().message()), "LUMEN_KV_MAX_TOTAL_BYTES"));

  // Deleting frees the space again.
  CHECK(store.DeletePrefix("n", "") == 6);
  CHECK(store.Put("m", "k3", std::string(100, 'v'), true).ok());
}

// Invariant: a parked waiter is answered exactly once — by the put of its key,
// or removed by its timeout or its connection's close — and counts against the
// limits only while parked.
TEST_CASE("kv store: waiters are woken by a put, removed on timeout and on close, bounded") {
  KvStore store(SmallLimits());
  REQUIRE(store.Put("n", "here", "1", true).ok());
  auto present = store.AddWaiter("n", "here", {1, 1});
  REQUIRE(present.ok());
  CHECK(*present);                  // answered at once, nothing parked
  CHECK(store.waiter_count() == 0);

  REQUIRE_FALSE(*store.AddWaiter("n", "k", {1, 2}));
  REQUIRE_FALSE(*store.AddWaiter("n", "k", {2, 1}));
  REQUIRE_FALSE(*store.AddWaiter("n", "x", {1, 5}));
  auto third = store.AddWaiter("n", "k", {1, 3});  // connection 1 holds its 2
  REQUIRE(third.status().code() == absl::StatusCode::kResourceExhausted);
  CHECK(Contains(std::string(third.status().message()), "LUMEN_KV_MAX_WAITERS_PER_CONNECTION"));
  REQUIRE_FALSE(*store.AddWaiter("n", "other", {3, 1}));
  auto over = store.AddWaiter("n", "k", {4, 1});    // the store holds its 4
  REQUIRE(over.status().code() == absl::StatusCode::kResourceExhausted);
  CHECK(Contains(std::string(over.status().message()), "LUMEN_KV_MAX_WAITERS)"));

  // A put in another namespace wakes nobody.
  auto elsewhere = store.Put("m", "k", "v", true);
  REQUIRE(elsewhere.ok());
  CHECK(elsewhere->woken.empty());
  auto put = store.Put("n", "k", "v", true);
  REQUIRE(put.ok());
  CHECK(put->woken == std::vector<KvStore::Waiter>{{1, 2}, {2, 1}});
  CHECK(store.waiter_count() == 2);
  CHECK_FALSE(store.RemoveWaiter({1, 2}));  // already answered

  CHECK(store.RemoveWaiter({3, 1}));        // its timeout
  CHECK(store.waiter_count() == 1);

  REQUIRE_FALSE(*store.AddWaiter("n", "a", {5, 1}));
  REQUIRE_FALSE(*store.AddWaiter("n", "b", {5, 2}));
  REQUIRE_FALSE(*store.AddWaiter("n", "a", {6, 1}));
  CHECK(store.DropConnection(5) == std::vector<KvStore::Waiter>{{5, 1}, {5, 2}});
  CHECK(store.waiter_count() == 2);
  auto wake_a = store.Put("n", "a", "v", true);
  REQUIRE(wake_a.ok());
  CHECK(wake_a->woken == std::vector<KvStore::Waiter>{{6, 1}});
  // Connection 5 may park again (its count went back to zero).
  CHECK_FALSE(*store.AddWaiter("n", "c", {5, 3}));
}

TEST_CASE("kv store: limits come from the environment when set") {
  ::setenv("LUMEN_KV_MAX_VALUE_BYTES", "2048", 1);
  ::setenv("LUMEN_KV_MAX_NAMESPACE_BYTES", "not-a-number", 1);
  KvLimits limits = KvLimits::FromEnv(KvLimits{});
  ::unsetenv("LUMEN_KV_MAX_VALUE_BYTES");
  ::unsetenv("LUMEN_KV_MAX_NAMESPACE_BYTES");
  CHECK(limits.max_value_bytes == 2048);
  CHECK(limits.max_namespace_bytes == 64ull << 20);  // malformed: the default stays
  CHECK(limits.max_key_bytes == 1024);
}
