// Checks that state documented as "io thread only" is touched from that thread.
//
//   class LeaseManager {
//     ThreadChecker io_thread_;   // bound to the first thread that checks it
//     void Dispatch() { io_thread_.Check(); ... }
//   };
//
// Where it checks (LUMEN_THREAD_CHECKS=1), a call from another thread aborts
// with both thread ids; elsewhere the check compiles to nothing. It checks in
// builds without NDEBUG (Debug) and in the sanitizer build (CMake's
// LUMEN_SANITIZE=ON, `scripts/test --sanitize`, which defines
// LUMEN_THREAD_CHECKS=1 for every target, as CMake's LUMEN_THREAD_CHECKS=ON
// does for any build type); not in RelWithDebInfo or Release, whose NDEBUG
// would otherwise leave it off. The definition must be the same in every file
// of a program (the class's size depends on it): set it project-wide, never
// per file. Thread-safe.
#pragma once

#ifndef LUMEN_THREAD_CHECKS
#ifdef NDEBUG
#define LUMEN_THREAD_CHECKS 0
#else
#define LUMEN_THREAD_CHECKS 1
#endif
#endif

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <thread>

namespace lumen {

class ThreadChecker {
 public:
  // Bound to the first thread that calls Check (or to none until then).
  ThreadChecker() = default;

  // Re-binds to the next thread that checks (the owner thread changed, e.g. an
  // event loop restarted on another thread).
  void Detach() {
#if LUMEN_THREAD_CHECKS
    owner_.store(0, std::memory_order_relaxed);
#endif
  }

  void Check(const char* what = "") const {
#if LUMEN_THREAD_CHECKS
    size_t self = std::hash<std::thread::id>{}(std::this_thread::get_id()) | 1;
    size_t expected = 0;
    if (owner_.compare_exchange_strong(expected, self, std::memory_order_relaxed)) return;
    if (expected != self) {
      std::fprintf(stderr, "lumen: %s touched from thread %zx, owned by thread %zx\n",
                   what, self, expected);
      std::abort();
    }
#else
    (void)what;
#endif
  }

 private:
#if LUMEN_THREAD_CHECKS
  mutable std::atomic<size_t> owner_{0};
#endif
};

}  // namespace lumen
