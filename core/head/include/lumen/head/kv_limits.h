// The limits of the head's key-value store (what one cluster's rendezvous data
// may use), each overridable from the environment.
//
//   lumen::head::KvLimits limits = lumen::head::KvLimits::FromEnv(lumen::head::KvLimits{});
//
// A value type; immutable after construction by convention.
#pragma once

#include <cstdint>

namespace lumen::head {

struct KvLimits {
  uint64_t max_key_bytes = 1024;                    // LUMEN_KV_MAX_KEY_BYTES
  uint64_t max_value_bytes = 1ull << 20;            // LUMEN_KV_MAX_VALUE_BYTES
  uint64_t max_namespace_bytes = 64ull << 20;       // LUMEN_KV_MAX_NAMESPACE_BYTES
  uint64_t max_total_bytes = 512ull << 20;          // LUMEN_KV_MAX_TOTAL_BYTES
  uint64_t max_waiters_per_connection = 1024;       // LUMEN_KV_MAX_WAITERS_PER_CONNECTION
  uint64_t max_waiters = 65536;                     // LUMEN_KV_MAX_WAITERS

  // `base` with every limit whose environment variable is set (to a positive
  // integer) replaced by it. A malformed value is ignored with a warning.
  static KvLimits FromEnv(KvLimits base);
};

}  // namespace lumen::head
