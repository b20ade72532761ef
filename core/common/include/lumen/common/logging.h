// Minimal leveled logging to stderr (Debian's Abseil has no absl log).
//
//   LUMEN_LOG(INFO) << "node " << id.Hex() << " joined";
//   LUMEN_LOG(ERROR) << "closing connection: " << status;
//
// The level comes from LUMEN_LOG_LEVEL (debug, info, warning, error; default warning).
// Each line is written with a single write(2): thread-safe and not interleaved.
#pragma once

#include <chrono>
#include <cstdint>
#include <sstream>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace lumen::logging {

enum class Level { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3, kFatal = 4 };

Level MinLevel();
// Prefixes each line with the process role ("node", "worker", ...).
void SetProcessTag(std::string tag);

class LogMessage {
 public:
  LogMessage(Level level, const char* file, int line);
  ~LogMessage();
  std::ostream& stream() { return stream_; }

 private:
  Level level_;
  std::ostringstream stream_;
};

// Allows at most `lines` log lines per `period` and counts the rest, for log
// sites a remote peer can trigger. Thread-safe.
//
//   static auto* limiter = new RateLimiter(5, std::chrono::seconds(1));
//   uint64_t suppressed;
//   if (limiter->Allow(&suppressed)) LUMEN_LOG(WARNING) << ... << suppressed << " suppressed";
class RateLimiter {
 public:
  RateLimiter(int lines, std::chrono::steady_clock::duration period)
      : lines_(lines), period_(period) {}
  // True when a line may be written now; then `*suppressed` is the number of
  // lines refused since the last one allowed.
  bool Allow(uint64_t* suppressed);

 private:
  const int lines_;
  const std::chrono::steady_clock::duration period_;
  absl::Mutex mu_;
  std::chrono::steady_clock::time_point window_start_ ABSL_GUARDED_BY(mu_);
  int used_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t suppressed_ ABSL_GUARDED_BY(mu_) = 0;
};

struct Voidify {
  void operator&(std::ostream&) {}
};

}  // namespace lumen::logging

#define LUMEN_LOG_LEVEL_DEBUG ::lumen::logging::Level::kDebug
#define LUMEN_LOG_LEVEL_INFO ::lumen::logging::Level::kInfo
#define LUMEN_LOG_LEVEL_WARNING ::lumen::logging::Level::kWarning
#define LUMEN_LOG_LEVEL_ERROR ::lumen::logging::Level::kError
#define LUMEN_LOG_LEVEL_FATAL ::lumen::logging::Level::kFatal

#define LUMEN_LOG(level)                                                \
  (LUMEN_LOG_LEVEL_##level < ::lumen::logging::MinLevel())              \
      ? (void)0                                                         \
      : ::lumen::logging::Voidify() &                                   \
            ::lumen::logging::LogMessage(LUMEN_LOG_LEVEL_##level, __FILE__, __LINE__).stream()

// For programmer bugs only: logs and aborts.
#define LUMEN_CHECK(cond) \
  if (!(cond)) LUMEN_LOG(FATAL) << "check failed: " #cond " "
