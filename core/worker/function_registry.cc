// The registry of remote functions, actor factories and methods
// (lumen/internal/runtime.h: RegisterFunction, FunctionName,
// FindRemoteFunction): filled by LUMEN_REMOTE at static-initialisation time,
// read by the executor. Thread-safe.
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/node_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "lumen/internal/runtime.h"

namespace lumen::internal {
namespace {

struct Registry {
  absl::Mutex mu;
  // Entries are never removed, and each lives in its own allocation.
  absl::flat_hash_map<std::string, std::unique_ptr<RemoteFunction>> by_name ABSL_GUARDED_BY(mu);
  // By pointer key; node-based: FunctionName hands out references to the names.
  absl::node_hash_map<std::string, std::string> names ABSL_GUARDED_BY(mu);
  absl::flat_hash_map<std::string, std::string> keys ABSL_GUARDED_BY(mu);   // by name
};

// Never destroyed: registrations and look-ups may run during static
// initialisation and destruction.
Registry& GetRegistry() {
  static Registry* registry = new Registry();
  return *registry;
}

}  // namespace

bool RegisterFunction(std::string name, std::string key, RemoteFunction function) {
  Registry& r = GetRegistry();
  absl::MutexLock lock(&r.mu);
  // Two different functions under one name would run the wrong one remotely
  // (the name is what travels): refuse at start-up, naming it. The same
  // function registered again (from another translation unit) is fine.
  auto [it, inserted] = r.keys.emplace(name, key);
  if (!inserted && it->second != key) {
    std::fprintf(stderr,
                 "lumen: LUMEN_REMOTE registers two different functions as '%s'; remote "
                 "calls go by name, so each name must be unique in the program: rename one\n",
                 name.c_str());
    std::_Exit(EXIT_FAILURE);
  }
  r.names[std::move(key)] = name;
  r.by_name[std::move(name)] = std::make_unique<RemoteFunction>(std::move(function));
  return true;
}

const std::string& FunctionName(const std::string& key) {
  static const std::string kNone;
  Registry& r = GetRegistry();
  absl::MutexLock lock(&r.mu);
  auto it = r.names.find(key);
  return it == r.names.end() ? kNone : it->second;
}

const RemoteFunction* FindRemoteFunction(std::string_view name) {
  Registry& r = GetRegistry();
  absl::MutexLock lock(&r.mu);
  // Heterogeneous lookup (no string made per task); Debian's Abseil has its
  // own string_view type.
  auto it = r.by_name.find(absl::string_view(name.data(), name.size()));
  return it == r.by_name.end() ? nullptr : it->second.get();
}

}  // namespace lumen::internal
