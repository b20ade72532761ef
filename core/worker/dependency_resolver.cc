// DependencyResolver: holds a task until its ObjectRef arguments are ready.
// io thread.
#include "core/worker/dependency_resolver.h"

#include <algorithm>
#include <utility>
#include <vector>

namespace lumen::runtime {
namespace {

// Whether any argument is an ObjectRef (only those need the table's lock).
bool HasRefArgument(const PendingTask& task) {
  return std::any_of(task.args.begin(), task.args.end(),
                     [](const internal::TaskArgument& arg) { return arg.ref != nullptr; });
}

}  // namespace

DependencyResolver::DependencyResolver(ObjectTable& table, Callbacks callbacks)
    : table_(table), callbacks_(std::move(callbacks)) {}

void DependencyResolver::Resolve(PendingTask* task) {
  if (!HasRefArgument(*task)) {
    callbacks_.on_resolved(task);  // nothing to wait for, nothing to lock
    return;
  }
  std::vector<std::pair<ObjectId, std::string>> to_request;
  {
    ObjectTable::Locked objects(table_);
    for (auto& arg : task->args) {
      if (!arg.ref) continue;
      auto it = objects->find(arg.ref->id());
      if (it == objects->end() || it->second.ready) continue;
      ObjectEntry& e = it->second;
      ++task->unresolved;
      e.on_ready.push_back([this, task] {
        if (--task->unresolved == 0) callbacks_.on_resolved(task);
      });
      if (!e.owned && !e.requested) {
        e.requested = true;
        to_request.emplace_back(arg.ref->id(), e.owner_address);
      }
    }
  }
  for (auto& [id, owner] : to_request) callbacks_.request_from_owner(id, owner);
  if (task->unresolved == 0) callbacks_.on_resolved(task);
}

std::optional<Failure> DependencyResolver::FailedArgument(const PendingTask& task) {
  if (!HasRefArgument(task)) return std::nullopt;
  ObjectTable::Locked objects(table_);
  for (const auto& arg : task.args) {
    if (!arg.ref) continue;
    auto it = objects->find(arg.ref->id());
    if (it != objects->end() && it->second.kind == ObjectEntry::Kind::kFailed) {
      return *it->second.failure;
    }
  }
  return std::nullopt;
}

}  // namespace lumen::runtime
