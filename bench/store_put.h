// PutIntoStore: a put that always goes through the node's shared-memory store,
// as Ray's `ray.put` does (Plasma), whatever the value's size.
//
//   ObjectRef<int> ref = PutIntoStore(0);   // created, written, sealed in the store
//   int zero = *lumen::Get(ref);            // read back through the store
//
// lumen::Put keeps values under kInlineObjectLimit in the owner's memory (no
// store round trip); the `_Plasma_Store` metrics measure the store path Put
// takes for large values, with a small value. Thread-safe after lumen::Init;
// throws lumen::ObjectStoreFullError / lumen::Error as Put.
#pragma once

#include <cstring>
#include <string>

#include "lumen/lumen.h"

namespace lumen::bench {

template <class T>
ObjectRef<T> PutIntoStore(const T& value) {
  std::string bytes = codec::EncodeValue<T>(value);
  return ObjectRef<T>(internal::PutWithWriter(
      bytes.size(), [&](uint8_t* out) { std::memcpy(out, bytes.data(), bytes.size()); }));
}

}  // namespace lumen::bench
