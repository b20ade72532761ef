#include "lumen/common/ids.h"

#include <sys/random.h>

#include <random>

namespace lumen {

void FillRandomBytes(uint8_t* out, size_t n) {
  // One OS-seeded generator per thread: ids are unique, not secret.
  thread_local std::mt19937_64 generator = [] {
    uint64_t seed[2] = {0, 0};
    if (getrandom(seed, sizeof(seed), 0) != sizeof(seed)) seed[0] = std::random_device()();
    std::seed_seq seq{seed[0], seed[0] >> 32, seed[1], seed[1] >> 32};
    return std::mt19937_64(seq);
  }();
  while (n > 0) {
    uint64_t r = generator();
    size_t k = n < sizeof(r) ? n : sizeof(r);
    std::memcpy(out, &r, k);
    out += k;
    n -= k;
  }
}

}  // namespace lumen
