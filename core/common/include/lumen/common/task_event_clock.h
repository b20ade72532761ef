// TaskEventClock: the clock task events are stamped with. Reading it is one
// `rdtsc` (~8 ns) where the CPU's time-stamp counter is invariant (constant
// rate, ticking in every power state: cpuid 0x80000007 EDX bit 8), instead of
// a system-clock read (~26 ns); the ticks become system-clock microseconds
// only when the events are drained, through a pair of readings of both clocks
// taken then (an anchor).
//
//   uint64_t t = TaskEventClock::Now();            // any thread, per event
//   TaskEventClock::Scale scale = clock.Anchor();  // the drain, once
//   int64_t us = scale.ToMicros(t);
//
// Without an invariant TSC (or off x86-64, or LUMEN_TASK_EVENT_TSC=0) a tick
// is a system-clock microsecond and the scale is the identity.
//
// Accuracy: each anchor maps a tick to the system clock as read at that drain
// (so the processes of one machine line up as the system clock does, and a
// clock step shows from the next drain on); the rate is measured from the
// clock's construction to the latest anchor, a baseline at least as long as
// any event's distance from the anchor, so a converted time is off by at most
// about one pair reading's spread (tens of nanoseconds).
//
// Now() is thread-safe; Anchor() is not (one caller at a time: the
// recorder's drain, under its lock).
#pragma once

#include <cstdint>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace lumen {

class TaskEventClock {
 public:
  // Converts the ticks of one drain to system-clock microseconds.
  struct Scale {
    uint64_t tick = 0;          // the anchor's tick...
    int64_t ns = 0;             // ...and the system clock's nanoseconds then
    double ns_per_tick = 1000;  // the identity on microseconds
    int64_t ToMicros(uint64_t t) const {
      double at = static_cast<double>(ns) +
                  static_cast<double>(static_cast<int64_t>(t - tick)) * ns_per_tick;
      return static_cast<int64_t>(at / 1000.0 + 0.5);
    }
    // The microseconds from tick `from` to tick `to`.
    int64_t SpanMicros(uint64_t from, uint64_t to) const {
      return static_cast<int64_t>(
          static_cast<double>(static_cast<int64_t>(to - from)) * ns_per_tick / 1000.0 + 0.5);
    }
  };

  TaskEventClock();

  // The clock now, in ticks. Thread-safe.
  static uint64_t Now() {
#if defined(__x86_64__)
    if (UsesTsc()) return __rdtsc();
#endif
    return SystemMicros();
  }
  // Whether ticks are TSC cycles (else system-clock microseconds); decided
  // once per process.
  static bool UsesTsc() {
    static const bool use_tsc = DetectTsc();
    return use_tsc;
  }

  // Reads both clocks now and returns the scale for the ticks recorded since
  // the last anchor (and before: one linear map).
  Scale Anchor();

  static uint64_t SystemMicros();

 private:
  static bool DetectTsc();

  // The first anchor (at construction): the start of the baseline the rate is
  // measured over. Every tick converted is later than it, so the error of a
  // converted time is at most that of one pair of readings (well under a
  // microsecond) however short the baseline.
  uint64_t first_tick_ = 0;
  int64_t first_ns_ = 0;
  double ns_per_tick_ = 1.0 / 3.0;  // a 3 GHz guess until measured
};

}  // namespace lumen
