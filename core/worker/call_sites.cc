#include "core/worker/call_sites.h"

#include "absl/container/node_hash_set.h"
#include "absl/synchronization/mutex.h"

namespace lumen::runtime {
namespace {

struct Interned {
  absl::Mutex mu;
  // node_hash_set: an element's address never changes.
  absl::node_hash_set<std::string> sites ABSL_GUARDED_BY(mu);
};

Interned& Table() {
  static Interned* table = new Interned;  // never destroyed: threads may intern at exit
  return *table;
}

}  // namespace

const std::string* CallSites::Intern(std::string_view site) {
  Interned& t = Table();
  absl::MutexLock lock(&t.mu);
  return &*t.sites.emplace(site).first;
}

const std::string* CallSites::OfPut(const std::source_location& where) {
  std::string_view file = where.file_name();
  if (file.empty()) return nullptr;
  if (size_t slash = file.rfind('/'); slash != std::string_view::npos) file.remove_prefix(slash + 1);
  std::string site = "Put at ";
  site.append(file).append(":").append(std::to_string(where.line()));
  return Intern(site);
}

}  // namespace lumen::runtime
