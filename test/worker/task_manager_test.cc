// Deterministic tests of the TaskManager: tasks and values made by the test,
// a real MemoryStore over a table; no processes, no sockets.
#include "core/worker/task_manager.h"

#include <capnp/message.h>

#include <memory>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

namespace lumen::runtime {
namespace {

struct ManagerRig {
  ObjectTable table;
  int on_ready_handed = 0;
  MemoryStore store{table,
                    {.run_on_ready = [this](const ObjectId&,
                                            std::vector<std::function<void()>>) { ++on_ready_handed; },
                     .delete_orphan_copies = [](const ObjectId&, std::vector<std::string>) {},
                     .request_from_owner = [](const ObjectId&, const std::string&) {},
                     .notify_blocked = [](bool) {}}};
  TaskManager tasks{store, /*history=*/3};

  std::unique_ptr<PendingTask> NewTask(const std::string& name, int max_retries) {
    auto task = std::make_unique<PendingTask>();
    task->task_id = TaskId::Random();
    task->return_id = ObjectId::ForTaskReturn(task->task_id, 1);
    task->display_name = name;
    task->max_retries = task->retries_left = max_retries;
    ObjectTable::Locked objects(table);
    ObjectEntry& e = (*objects)[task->return_id];  // the caller's ObjectRef
    e.owned = true;
    e.local_refs = 1;
    return task;
  }
  const ObjectEntry& Entry(const ObjectId& id) {
    ObjectTable::Locked objects(table);
    return *objects->find_value(id);  // stable: node_hash_map
  }
};

TEST_CASE("a task whose worker dies is retried while its budget lasts, then fails once",
          "[worker][tasks]") {
  // Invariant: a task with max_retries = N gets exactly N more attempts,
  // numbered 1..N; after that it fails for good: its return object fails with
  // the failure given and the history records it FAILED, once.
  ManagerRig rig;
  auto task = rig.NewTask("flaky", 2);
  ObjectId result = task->return_id;
  REQUIRE(rig.tasks.ConsumeRetry(*task));
  CHECK(task->attempt == 1);
  REQUIRE(rig.tasks.ConsumeRetry(*task));
  CHECK(task->attempt == 2);
  REQUIRE_FALSE(rig.tasks.ConsumeRetry(*task));
  CHECK(task->attempt == 2);
  CHECK_FALSE(rig.Entry(result).ready.load());
  TaskId id = task->task_id;
  rig.tasks.Fail(std::move(task),
                 Failure{proto::FailureKind::WORKER_CRASHED, "", "the worker died", ""});
  const ObjectEntry& e = rig.Entry(result);
  REQUIRE(e.ready.load());
  CHECK(e.kind == ObjectEntry::Kind::kFailed);
  CHECK(e.failure->kind == proto::FailureKind::WORKER_CRASHED);
  CHECK(e.failure->message == "the worker died");
  REQUIRE(rig.tasks.finished().size() == 1);
  CHECK(rig.tasks.finished()[0].id == id);
  CHECK(rig.tasks.finished()[0].name == "flaky");
  CHECK(std::string(rig.tasks.finished()[0].state) == "FAILED");
}

TEST_CASE("a completed task gives its result a value, and the history keeps the last few",
          "[worker][tasks]") {
  // Invariant: Complete makes the return object ready with the reply's value
  // (an error value counts as FAILED in the history); the history is capped,
  // oldest out first, and actor creations are not tasks in it.
  ManagerRig rig;
  capnp::MallocMessageBuilder message;
  auto value = message.initRoot<proto::Value>();
  std::string bytes = "forty-two";
  value.setInline(capnp::Data::Reader(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
  auto first = rig.NewTask("first", 0);
  rig.tasks.Complete(*first, value.asReader());
  const ObjectEntry& e = rig.Entry(first->return_id);
  REQUIRE(e.ready.load());
  CHECK(e.kind == ObjectEntry::Kind::kInline);
  CHECK(*e.value == bytes);

  capnp::MallocMessageBuilder error_message;
  auto error = error_message.initRoot<proto::Value>();
  error.initError().setMessage("boom");
  auto second = rig.NewTask("second", 0);
  rig.tasks.Complete(*second, error.asReader());
  CHECK(rig.Entry(second->return_id).kind == ObjectEntry::Kind::kFailed);

  auto creation = rig.NewTask("an actor", 0);
  creation->kind = proto::TaskKind::ACTOR_CREATION;
  rig.tasks.Complete(*creation, value.asReader());
  for (const char* name : {"third", "fourth"}) {
    auto task = rig.NewTask(name, 0);
    rig.tasks.Complete(*task, value.asReader());
  }
  std::vector<std::string> names;
  std::vector<std::string> states;
  for (const auto& f : rig.tasks.finished()) {
    names.push_back(f.name);
    states.push_back(f.state);
  }
  CHECK(names == std::vector<std::string>{"second", "third", "fourth"});
  CHECK(states == std::vector<std::string>{"FAILED", "FINISHED", "FINISHED"});
}

TEST_CASE("a retried attempt's executor events are recorded by its owner, in the worker's pid",
          "[worker][tasks][task_events]") {
  // Invariant: an attempt that threw and runs again (retry_exceptions) gets no
  // FINISHED/FAILED to carry its executor's events: the owner records them
  // from the reply, under that attempt, in the worker's pid, at the reply's
  // times. A reply without them (the worker recorded them itself) adds none.
  ManagerRig rig;
  auto task = rig.NewTask("flaky", 2);
  task->function = "Flaky";
  task->lease_node = NodeId::Random();
  TaskEvents().Drain();
  capnp::MallocMessageBuilder message;
  auto reply = message.initRoot<proto::TaskReply>();
  reply.setAttempt(0);
  reply.setStartedMicros(1'000'000);
  reply.setArgsFetchMicros(5);
  reply.setRunMicros(100);
  reply.setStoreMicros(7);
  reply.setWorkerPid(4321);
  rig.tasks.RecordUnfinishedAttempt(*task, reply.asReader());
  reply.setStartedMicros(0);
  rig.tasks.RecordUnfinishedAttempt(*task, reply.asReader());
  std::vector<TaskEvent> events;
  for (TaskEvent& e : TaskEvents().Drain()) {
    if (e.task_id == task->task_id) events.push_back(std::move(e));
  }
  REQUIRE(events.size() == 4);
  const std::vector<TaskEventKind> kinds = {TaskEventKind::kStarted, TaskEventKind::kArgsFetched,
                                            TaskEventKind::kExecuted, TaskEventKind::kResultStored};
  const std::vector<int64_t> times = {1'000'000, 1'000'005, 1'000'105, 1'000'112};
  for (size_t i = 0; i < events.size(); ++i) {
    CHECK(events[i].kind == kinds[i]);
    CHECK(events[i].time_us == times[i]);
    CHECK(events[i].pid == 4321);
    CHECK(events[i].attempt == 0);
  }
  CHECK(events[0].name == "Flaky");
  CHECK(events[0].node == task->lease_node);
}

}  // namespace
}  // namespace lumen::runtime
