// ConfigureMutexDeadlockDetection (mutex_mode.h).
#include "lumen/common/mutex_mode.h"

#include <cstdlib>
#include <cstring>

#include "absl/synchronization/mutex.h"

namespace lumen {
namespace {

#ifdef NDEBUG
constexpr bool kDetectByDefault = false;
#else
constexpr bool kDetectByDefault = true;
#endif

}  // namespace

void ConfigureMutexDeadlockDetection() {
  bool detect = kDetectByDefault;
  if (const char* v = std::getenv("LUMEN_MUTEX_DEADLOCK_DETECTION"); v != nullptr && *v != '\0') {
    detect = std::strcmp(v, "0") != 0;
  }
  absl::SetMutexDeadlockDetectionMode(detect ? absl::OnDeadlockCycle::kAbort
                                             : absl::OnDeadlockCycle::kIgnore);
}

}  // namespace lumen
