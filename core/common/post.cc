#include "lumen/common/post.h"

#include "lumen/common/logging.h"
#include "lumen/common/timeouts.h"

namespace lumen {

std::chrono::steady_clock::duration SlowHandlerThreshold() {
  static const std::chrono::steady_clock::duration threshold =
      Timeouts::FromEnv().slow_handler_warning;
  return threshold;
}

void ReportSlowHandler(const char* name, std::chrono::steady_clock::duration took) {
  static auto* limiter = new logging::RateLimiter(5, std::chrono::seconds(10));
  uint64_t suppressed = 0;
  if (!limiter->Allow(&suppressed)) return;
  LUMEN_LOG(WARNING) << "handler '" << name << "' held its event loop for "
                     << std::chrono::duration_cast<std::chrono::milliseconds>(took).count()
                     << " ms (LUMEN_SLOW_HANDLER_WARNING_MS); " << suppressed
                     << " similar reports suppressed";
}

}  // namespace lumen
