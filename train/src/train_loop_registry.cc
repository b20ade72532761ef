// The table of train loops by name (LUMEN_TRAIN_LOOP): filled by static
// initialisers before main, read by the driver (name of a loop) and by the
// worker actors (loop of a name). Guarded by a mutex: any thread.
#include <map>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

#include "lumen/train/trainer.h"

namespace lumen::train::internal {
namespace {
struct Registry {
  absl::Mutex mu;
  std::map<std::string, TrainLoop> by_name ABSL_GUARDED_BY(mu);
};
Registry& TheRegistry() {
  static Registry* registry = new Registry;  // never destroyed: static initialisers use it
  return *registry;
}
}  // namespace

bool RegisterTrainLoop(const char* name, TrainLoop loop) {
  Registry& r = TheRegistry();
  absl::MutexLock lock(&r.mu);
  return r.by_name.emplace(name, loop).second;
}

std::string TrainLoopName(TrainLoop loop) {
  Registry& r = TheRegistry();
  absl::MutexLock lock(&r.mu);
  for (const auto& [name, f] : r.by_name) {
    if (f == loop) return name;
  }
  return "";
}

TrainLoop FindTrainLoop(const std::string& name) {
  Registry& r = TheRegistry();
  absl::MutexLock lock(&r.mu);
  auto it = r.by_name.find(name);
  return it == r.by_name.end() ? nullptr : it->second;
}

}  // namespace lumen::train::internal
