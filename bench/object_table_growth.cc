// The owner's object table growing to N entries, one insert at a time as a
// submitting driver does: the longest single insert (the one that rehashes)
// with a plain node_hash_map (the table before issue 17's sharding) and with
// ObjectTable::Map (64 sub-maps), each under the table's lock as in the driver.
//
//   build/bench/object_table_growth [N]     (default 1000000)
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/container/node_hash_map.h"
#include "core/worker/object_table.h"

namespace {

using lumen::ObjectId;
using lumen::runtime::ObjectEntry;

ObjectId IdOf(uint64_t i) {
  std::string bytes(ObjectId::kSize, '\0');
  std::memcpy(bytes.data(), &i, sizeof(i));
  bytes[19] = 1;  // not the nil id
  return ObjectId::FromBinary(bytes);
}

// Inserts n entries; returns the longest insert in ms and where (its index).
template <class Map>
std::pair<double, long> Grow(Map& map, long n) {
  double longest = 0;
  long at = 0;
  for (long i = 0; i < n; ++i) {
    const ObjectId id = IdOf(static_cast<uint64_t>(i) * 0x9E3779B97F4A7C15ull);
    const auto start = std::chrono::steady_clock::now();
    map.try_emplace(id).first->second.local_refs = 1;
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (ms > longest) {
      longest = ms;
      at = i;
    }
  }
  return {longest, at};
}

}  // namespace

int main(int argc, char** argv) {
  const long n = argc > 1 ? std::atol(argv[1]) : 1000000;
  {
    absl::node_hash_map<ObjectId, ObjectEntry> plain;
    auto [ms, at] = Grow(plain, n);
    std::printf("node_hash_map     N=%ld longest insert %.1f ms (insert #%ld)\n", n, ms, at);
  }
  {
    lumen::runtime::ObjectTable table;
    lumen::runtime::ObjectTable::Locked objects(table);
    auto [ms, at] = Grow(*objects, n);
    std::printf("ObjectTable::Map  N=%ld longest insert %.1f ms (insert #%ld)\n", n, ms, at);
  }
  return 0;
}
