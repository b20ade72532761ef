#include "lumen/common/task_event_clock.h"

#include <time.h>

#include <cstdlib>
#include <cstring>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace lumen {
namespace {

// A reading of both clocks close together: the TSC before and after the
// system clock, retried (at most 4 times) while a preemption or interrupt
// stretches the pair, keeping the tightest.
struct Pair {
  uint64_t tick;
  int64_t ns;
};

int64_t SystemNanos() {
  struct timespec ts;
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

Pair ReadPair() {
#if defined(__x86_64__)
  Pair best{0, 0};
  uint64_t best_gap = ~0ull;
  for (int i = 0; i < 4; ++i) {
    uint64_t before = __rdtsc();
    int64_t ns = SystemNanos();
    uint64_t after = __rdtsc();
    if (after - before < best_gap) {
      best_gap = after - before;
      best = Pair{before + (after - before) / 2, ns};
    }
    if (best_gap < 2000) break;  // well under a microsecond
  }
  return best;
#else
  return Pair{0, 0};
#endif
}

}  // namespace

bool TaskEventClock::DetectTsc() {
#if defined(__x86_64__)
  const char* v = std::getenv("LUMEN_TASK_EVENT_TSC");
  if (v != nullptr && std::strcmp(v, "0") == 0) return false;
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid_max(0x80000000, nullptr) < 0x80000007) return false;
  __cpuid(0x80000007, eax, ebx, ecx, edx);
  return (edx & (1u << 8)) != 0;  // invariant TSC
#else
  return false;
#endif
}

uint64_t TaskEventClock::SystemMicros() {
  struct timespec ts;
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000ull + static_cast<uint64_t>(ts.tv_nsec) / 1000;
}

TaskEventClock::TaskEventClock() {
  if (!UsesTsc()) return;
  Pair p = ReadPair();
  first_tick_ = p.tick;
  first_ns_ = p.ns;
}

TaskEventClock::Scale TaskEventClock::Anchor() {
  if (!UsesTsc()) return Scale{};  // ticks are microseconds already
  Pair p = ReadPair();
  uint64_t span = p.tick - first_tick_;
  // A system clock stepped back (or no time passed) keeps the last rate.
  if (span > 0 && p.ns > first_ns_) {
    ns_per_tick_ = static_cast<double>(p.ns - first_ns_) / static_cast<double>(span);
  }
  return Scale{p.tick, p.ns, ns_per_tick_};
}

}  // namespace lumen
