// Deterministic tests of the DependencyResolver: arguments made ready by the
// test through a real MemoryStore whose on_ready callbacks the test runs (as
// the io thread would); no processes, no sockets.
#include "core/worker/dependency_resolver.h"

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "core/worker/memory_store.h"

namespace lumen::runtime {
namespace {

struct ResolverRig {
  ObjectTable table;
  std::vector<std::function<void()>> io_queue;  // on_ready callbacks, not yet run
  std::vector<std::pair<ObjectId, std::string>> owner_requests;
  std::vector<PendingTask*> resolved;
  MemoryStore store{table,
                    {.run_on_ready =
                         [this](const ObjectId&, std::vector<std::function<void()>> callbacks) {
                           for (auto& cb : callbacks) io_queue.push_back(std::move(cb));
                         },
                     .delete_orphan_copies = [](const ObjectId&, std::vector<std::string>) {},
                     .request_from_owner = [](const ObjectId&, const std::string&) {},
                     .notify_blocked = [](bool) {}}};
  DependencyResolver resolver{
      table,
      {.request_from_owner =
           [this](const ObjectId& id, const std::string& owner) {
             owner_requests.emplace_back(id, owner);
           },
       .on_resolved = [this](PendingTask* task) { resolved.push_back(task); }}};

  // An argument ref (not registered with a runtime: there is none here) and
  // its entry, pending, owned here or borrowed from `owner`.
  internal::TaskArgument Arg(const std::string& owner = "") {
    ObjectId id = ObjectId::ForPut();
    ObjectTable::Locked objects(table);
    ObjectEntry& e = (*objects)[id];
    e.owned = owner.empty();
    e.owner_address = owner;
    e.local_refs = 1;
    internal::TaskArgument arg;
    arg.ref = std::make_shared<internal::RefHandle>(id, owner.empty() ? "me" : owner);
    return arg;
  }
  void RunIo() {
    auto queue = std::move(io_queue);
    io_queue.clear();
    for (auto& cb : queue) cb();
  }
};

TEST_CASE("a task is resolved once, when its last argument is ready", "[worker][resolver]") {
  // Invariant: a task with pending ref arguments is handed on exactly once,
  // after the last of them became ready (and the io thread ran its callbacks),
  // never before; a borrowed argument's owner is asked for it once.
  ResolverRig rig;
  auto task = std::make_unique<PendingTask>();
  task->args.push_back(rig.Arg());
  task->args.push_back(rig.Arg("owner:5"));
  task->args.emplace_back();  // an inline value
  task->args.back().value = "inline";
  rig.resolver.Resolve(task.get());
  CHECK(rig.resolved.empty());
  REQUIRE(rig.owner_requests.size() == 1);
  CHECK(rig.owner_requests[0].second == "owner:5");
  rig.store.SetFailed(task->args[1].ref->id(),
                      Failure{proto::FailureKind::OBJECT_LOST, "", "owner died", ""});
  rig.RunIo();
  CHECK(rig.resolved.empty());
  rig.store.SetReady(task->args[0].ref->id(), [](ObjectEntry& e) {
    e.kind = ObjectEntry::Kind::kInline;
    e.value = std::make_shared<const std::string>("x");
  });
  CHECK(rig.resolved.empty());  // not before the io thread ran the callback
  rig.RunIo();
  REQUIRE(rig.resolved == std::vector<PendingTask*>{task.get()});
  rig.RunIo();
  CHECK(rig.resolved.size() == 1);
  // The failed argument is what the task fails with.
  auto failure = rig.resolver.FailedArgument(*task);
  REQUIRE(failure.has_value());
  CHECK(failure->message == "owner died");
}

TEST_CASE("a task whose arguments are all here is resolved at once", "[worker][resolver]") {
  // Invariant: no pending argument means no waiting and no owner asked.
  ResolverRig rig;
  auto task = std::make_unique<PendingTask>();
  task->args.push_back(rig.Arg());
  rig.store.SetReady(task->args[0].ref->id(), [](ObjectEntry& e) {
    e.kind = ObjectEntry::Kind::kInline;
    e.value = std::make_shared<const std::string>("x");
  });
  rig.RunIo();
  rig.resolver.Resolve(task.get());
  CHECK(rig.resolved == std::vector<PendingTask*>{task.get()});
  CHECK(rig.owner_requests.empty());
  CHECK_FALSE(rig.resolver.FailedArgument(*task).has_value());
}

}  // namespace
}  // namespace lumen::runtime
