// Checks that state documented as "io thread only" is touched from that thread.
//
//   class LeaseManager {
//     ThreadChecker io_thread_;   // bound to the first thread that checks it
//     void Dispatch() { io_thread_.Check(); ... }
//   };
//
// In builds without NDEBUG a call from another thread aborts with both thread
// ids; with NDEBUG the check compiles to nothing. Thread-safe.
#pragma once

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
#ifndef NDEBUG
    owner_.store(0, std::memory_order_relaxed);
#endif
  }

  void Check(const char* what = "") const {
#ifndef NDEBUG
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
#ifndef NDEBUG
  mutable std::atomic<size_t> owner_{0};
#endif
};

}  // namespace lumen
