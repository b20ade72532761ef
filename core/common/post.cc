#include "lumen/common/post.h"

#include <atomic>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "lumen/common/logging.h"
#include "lumen/common/timeouts.h"

namespace lumen {
namespace {

// A plain function pointer, so that timing a handler costs one relaxed load.
std::atomic<PostClockFn> test_clock{nullptr};

absl::Mutex observer_mu;
SlowHandlerObserver* observer ABSL_GUARDED_BY(observer_mu) = nullptr;

}  // namespace

namespace post_internal {
std::chrono::steady_clock::time_point Now() {
  PostClockFn now = test_clock.load(std::memory_order_relaxed);
  return now != nullptr ? now() : std::chrono::steady_clock::now();
}
}  // namespace post_internal

std::chrono::steady_clock::duration SlowHandlerThreshold() {
  static const std::chrono::steady_clock::duration threshold =
      Timeouts::FromEnv().slow_handler_warning;
  return threshold;
}

void ReportSlowHandler(const char* name, std::chrono::steady_clock::duration took) {
  {
    absl::MutexLock lock(&observer_mu);
    if (observer != nullptr) (*observer)(name, took);
  }
  static auto* limiter = new logging::RateLimiter(5, std::chrono::seconds(10));
  uint64_t suppressed = 0;
  if (!limiter->Allow(&suppressed)) return;
  LUMEN_LOG(WARNING) << "handler '" << name << "' held its event loop for "
                     << std::chrono::duration_cast<std::chrono::milliseconds>(took).count()
                     << " ms (LUMEN_SLOW_HANDLER_WARNING_MS); " << suppressed
                     << " similar reports suppressed";
}

void TEST_SetPostClock(PostClockFn now) { test_clock.store(now, std::memory_order_relaxed); }

void TEST_SetSlowHandlerObserver(SlowHandlerObserver new_observer) {
  absl::MutexLock lock(&observer_mu);
  delete observer;
  observer = new_observer ? new SlowHandlerObserver(std::move(new_observer)) : nullptr;
}

}  // namespace lumen
