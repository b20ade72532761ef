#include "lumen/common/logging.h"

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <ctime>

namespace lumen::logging {
namespace {

Level ParseLevel() {
  const char* env = std::getenv("LUMEN_LOG_LEVEL");
  if (env == nullptr) return Level::kWarning;
  if (!strcasecmp(env, "debug")) return Level::kDebug;
  if (!strcasecmp(env, "warning") || !strcasecmp(env, "warn")) return Level::kWarning;
  if (!strcasecmp(env, "error")) return Level::kError;
  return Level::kInfo;
}

std::string& ProcessTag() {
  static std::string* tag = new std::string("driver");
  return *tag;
}

}  // namespace

Level MinLevel() {
  static const Level level = ParseLevel();
  return level;
}

void SetProcessTag(std::string tag) { ProcessTag() = std::move(tag); }

bool RateLimiter::Allow(uint64_t* suppressed) {
  absl::MutexLock lock(&mu_);
  auto now = std::chrono::steady_clock::now();
  if (now - window_start_ >= period_) {
    window_start_ = now;
    used_ = 0;
  }
  if (used_ >= lines_) {
    ++suppressed_;
    return false;
  }
  ++used_;
  *suppressed = suppressed_;
  suppressed_ = 0;
  return true;
}

LogMessage::LogMessage(Level level, const char* file, int line) : level_(level) {
  static constexpr const char* kNames[] = {"D", "I", "W", "E", "F"};
  auto now = std::chrono::system_clock::now();
  std::time_t secs = std::chrono::system_clock::to_time_t(now);
  int micros = static_cast<int>(
      std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count() %
      1000000);
  std::tm tm;
  localtime_r(&secs, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), "%H:%M:%S", &tm);
  const char* base = std::strrchr(file, '/');
  stream_ << kNames[static_cast<int>(level)] << " " << stamp << "." << micros << " "
          << ProcessTag() << "[" << getpid() << "] " << (base ? base + 1 : file) << ":" << line
          << "] ";
}

LogMessage::~LogMessage() {
  stream_ << '\n';
  std::string line = stream_.str();
  ssize_t ignored = ::write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
  if (level_ == Level::kFatal) std::abort();
}

}  // namespace lumen::logging
