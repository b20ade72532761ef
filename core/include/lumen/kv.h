// lumen::kv: the head's key-value store, for small shared data such as
// rendezvous addresses (Ray's internal KV). Usable from the driver and from
// inside tasks and actors; every call is one request to the head.
//
//   lumen::kv::Put("leader", "10.0.0.5:7000", "my-job");
//   std::optional<std::string> v = lumen::kv::Get("leader", "my-job");
//   if (lumen::kv::Wait("ready", std::chrono::seconds(10), "my-job")) { ... }
//   lumen::kv::Delete("leader", "my-job");
//   lumen::kv::DeletePrefix("step-", "my-job");        // every key starting with "step-"
//
// Keys live in namespaces (`ns`; "" is the default namespace). Limits, set on
// the head by environment variables (defaults in brackets): a key or
// namespace name of at most LUMEN_KV_MAX_KEY_BYTES [1024], a value of at most
// LUMEN_KV_MAX_VALUE_BYTES [1 MiB], LUMEN_KV_MAX_NAMESPACE_BYTES [64 MiB] per
// namespace and LUMEN_KV_MAX_TOTAL_BYTES [512 MiB] in all (an entry counts its
// key, its value and 64 bytes), LUMEN_KV_MAX_WAITERS [65536] parked waits. A
// request over a limit throws KvError naming the limit and its value and
// changes nothing.
//
// Errors: KvError (a limit, an invalid key, the head unreachable); Error when
// lumen::Init has not run. Thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "lumen/errors.h"

namespace lumen::kv {

// Stores `value` under `key`. With `overwrite` false an existing key keeps its
// value. Returns whether the value was written.
bool Put(const std::string& key, const std::string& value, const std::string& ns = "",
         bool overwrite = true);

// The value under `key`, or nullopt.
std::optional<std::string> Get(const std::string& key, const std::string& ns = "");

bool Exists(const std::string& key, const std::string& ns = "");

// Removes `key`; returns whether it was there.
bool Delete(const std::string& key, const std::string& ns = "");

// Removes every key of `ns` that starts with `prefix`; returns how many.
uint64_t DeletePrefix(const std::string& prefix, const std::string& ns = "");

// The keys of `ns` that start with `prefix`, in byte order (at most 100000).
std::vector<std::string> Keys(const std::string& prefix, const std::string& ns = "");

// Blocks until `key` exists (true) or `timeout` passes (false). The head
// parks the request and answers it when the key is put, so nothing polls.
bool Wait(const std::string& key, std::chrono::milliseconds timeout, const std::string& ns = "");

}  // namespace lumen::kv
