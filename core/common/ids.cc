#include "lumen/common/ids.h"

#include <pthread.h>
#include <sys/random.h>

#include <atomic>
#include <cstring>

#include <random>

namespace lumen {

namespace {

// Bumped in the child of every fork: a worker forked from a worker template
// must not repeat the ids of its siblings (each thread's generator below
// would otherwise be a copy of the template's).
std::atomic<uint64_t> fork_generation{0};
[[maybe_unused]] const int fork_handler_registered =
    ::pthread_atfork(nullptr, nullptr, [] { fork_generation.fetch_add(1, std::memory_order_relaxed); });

std::mt19937_64 SeededGenerator() {
  uint64_t seed[2] = {0, 0};
  if (getrandom(seed, sizeof(seed), 0) != sizeof(seed)) seed[0] = std::random_device()();
  std::seed_seq seq{seed[0], seed[0] >> 32, seed[1], seed[1] >> 32};
  return std::mt19937_64(seq);
}

}  // namespace

void FillRandomBytes(uint8_t* out, size_t n) {
  // One OS-seeded generator per thread (and per process: reseeded after a
  // fork): ids are unique, not secret.
  thread_local std::mt19937_64 generator = SeededGenerator();
  thread_local uint64_t generation = fork_generation.load(std::memory_order_relaxed);
  if (uint64_t now = fork_generation.load(std::memory_order_relaxed); now != generation) {
    generation = now;
    generator = SeededGenerator();
  }
  while (n > 0) {
    uint64_t r = generator();
    size_t k = n < sizeof(r) ? n : sizeof(r);
    std::memcpy(out, &r, k);
    out += k;
    n -= k;
  }
}

}  // namespace lumen
