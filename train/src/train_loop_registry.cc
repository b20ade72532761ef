// The table of train loops by name (LUMEN_TRAIN_LOOP): filled by static
// initialisers before main, read by the driver (name of a loop) and by the
// worker actors (loop of a name). Guarded by a mutex: any thread.
#include <map>
#include <mutex>

#include "lumen/train/trainer.h"

namespace lumen::train::internal {
namespace {
struct Registry {
  std::mutex mu;
  std::map<std::string, TrainLoop> by_name;  // guarded by mu
};
Registry& TheRegistry() {
  static Registry* registry = new Registry;  // never destroyed: static initialisers use it
  return *registry;
}
}  // namespace

bool RegisterTrainLoop(const char* name, TrainLoop loop) {
  Registry& r = TheRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  return r.by_name.emplace(name, loop).second;
}

std::string TrainLoopName(TrainLoop loop) {
  Registry& r = TheRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  for (const auto& [name, f] : r.by_name) {
    if (f == loop) return name;
  }
  return "";
}

TrainLoop FindTrainLoop(const std::string& name) {
  Registry& r = TheRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.by_name.find(name);
  return it == r.by_name.end() ? nullptr : it->second;
}

}  // namespace lumen::train::internal
