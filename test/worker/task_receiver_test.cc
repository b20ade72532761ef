// Deterministic tests of the TaskReceiver's queue and hand-back logic: tasks
// made by the test, one thread, no processes, no sockets (Take is called with
// a zero timeout, so it never waits).
#include "core/worker/task_receiver.h"

#include <catch2/catch.hpp>
#include <memory>
#include <vector>

namespace lumen::runtime {
namespace {

std::unique_ptr<TaskToRun> NewTask(const TaskId& id) {
  auto task = std::make_unique<TaskToRun>();
  task->task_id = id;
  return task;
}

std::unique_ptr<TaskToRun> TakeNow(TaskReceiver& receiver) {
  return receiver.Take(absl::ZeroDuration(), [] { return false; });
}

TEST_CASE("received tasks run in arrival order", "[worker][receiver]") {
  // Invariant: the executor takes tasks in the order they arrived, each once;
  // HasQueued says whether one waits.
  TaskReceiver receiver;
  CHECK_FALSE(receiver.HasQueued());
  CHECK(TakeNow(receiver) == nullptr);
  std::vector<TaskId> ids{TaskId::Random(), TaskId::Random(), TaskId::Random()};
  for (const auto& id : ids) REQUIRE(receiver.Receive(NewTask(id)) == nullptr);
  CHECK(receiver.HasQueued());
  for (const auto& id : ids) {
    auto task = TakeNow(receiver);
    REQUIRE(task != nullptr);
    CHECK(task->task_id == id);
  }
  CHECK_FALSE(receiver.HasQueued());
  CHECK(TakeNow(receiver) == nullptr);
}

TEST_CASE("a plain worker blocked in Get hands queued and new tasks back until it unblocks",
          "[worker][receiver]") {
  // Invariant: when the running task of a plain worker blocks, every queued
  // task is handed back, oldest first, and so is each task arriving while it
  // stays blocked; none is also kept to run here. After it unblocks, arrivals
  // queue again.
  TaskReceiver receiver;
  TaskId a = TaskId::Random(), b = TaskId::Random(), c = TaskId::Random();
  REQUIRE(receiver.Receive(NewTask(a)) == nullptr);
  REQUIRE(receiver.Receive(NewTask(b)) == nullptr);
  auto back = receiver.SetBlocked(true);
  REQUIRE(back.size() == 2);
  CHECK(back[0]->task_id == a);
  CHECK(back[1]->task_id == b);
  CHECK_FALSE(receiver.HasQueued());
  auto returned = receiver.Receive(NewTask(c));
  REQUIRE(returned != nullptr);
  CHECK(returned->task_id == c);
  CHECK(TakeNow(receiver) == nullptr);
  CHECK(receiver.SetBlocked(false).empty());
  REQUIRE(receiver.Receive(NewTask(c)) == nullptr);
  auto task = TakeNow(receiver);
  REQUIRE(task != nullptr);
  CHECK(task->task_id == c);
}

TEST_CASE("an actor keeps its calls while it blocks, once exiting it starts none",
          "[worker][receiver]") {
  // Invariant: an actor's calls are never handed back (they must run on this
  // instance, in order); after StopAfterCurrent no queued call starts and
  // arrivals are dropped (not handed back).
  TaskReceiver receiver;
  receiver.BecomeActor();
  TaskId a = TaskId::Random(), b = TaskId::Random();
  REQUIRE(receiver.Receive(NewTask(a)) == nullptr);
  CHECK(receiver.SetBlocked(true).empty());
  REQUIRE(receiver.Receive(NewTask(b)) == nullptr);
  auto first = TakeNow(receiver);
  REQUIRE(first != nullptr);
  CHECK(first->task_id == a);
  receiver.StopAfterCurrent();
  CHECK(TakeNow(receiver) == nullptr);
  CHECK(receiver.Receive(NewTask(TaskId::Random())) == nullptr);
  receiver.DropQueued();
  CHECK_FALSE(receiver.HasQueued());
}

TEST_CASE("Take gives up when its condition holds", "[worker][receiver]") {
  // Invariant: an executor waiting for work returns (with nothing) once the
  // give-up condition holds, e.g. the node daemon is gone.
  TaskReceiver receiver;
  bool node_lost = true;
  CHECK(receiver.Take(absl::Hours(1), [&] { return node_lost; }) == nullptr);
}

}  // namespace
}  // namespace lumen::runtime
