// Deterministic tests of the TaskReceiver's queue and hand-back logic: tasks
// made by the test, no processes, no sockets. Most cases use one thread and
// TryTake (never waits); the blocking Take is tested with a second thread.
#include "core/worker/task_receiver.h"

#include <catch2/catch.hpp>
#include <chrono>
#include <future>
#include <memory>
#include <thread>
#include <vector>

namespace lumen::runtime {
namespace {

std::unique_ptr<TaskToRun> NewTask(const TaskId& id) {
  auto task = std::make_unique<TaskToRun>();
  task->task_id = id;
  return task;
}

std::unique_ptr<TaskToRun> TakeNow(TaskReceiver& receiver) {
  return receiver.TryTake();
}

TEST_CASE("a finished task's record comes back as new for the next arrival", "[worker][receiver]") {
  // Invariant: NewTask returns the record an executor recycled, every field at
  // its default (no connection, arguments or ids left over); a record holding
  // large argument values is not kept; NewTask makes a new one when none is.
  TaskReceiver receiver;
  std::unique_ptr<TaskToRun> task = receiver.NewTask();
  TaskToRun* record = task.get();
  task->task_id = TaskId::Random();
  task->attempt = 2;
  task->function = "a_function_name_longer_than_the_short_string_buffer";
  task->kind = proto::TaskKind::ACTOR_METHOD;
  task->gpu_ids = {0, 1};
  task->args.push_back(TaskToRun::Arg{.value = "value", .is_stored = true, .size = 5});
  task->args_fetched_tick = 7;
  receiver.Recycle(std::move(task));
  std::unique_ptr<TaskToRun> again = receiver.NewTask();
  CHECK(again.get() == record);
  CHECK(again->task_id == TaskId());
  CHECK(again->attempt == 0);
  CHECK(again->function.empty());
  CHECK(again->kind == proto::TaskKind::NORMAL);
  CHECK(again->gpu_ids.empty());
  CHECK(again->args.empty());
  CHECK(again->args_fetched_tick == 0);
  CHECK(again->reply_to.expired());
  CHECK(receiver.NewTask().get() != record);  // none kept now: a new one

  CHECK(receiver.TEST_kept_records() == 0);
  auto big = receiver.NewTask();
  big->args.push_back(
      TaskToRun::Arg{.value = std::string(TaskReceiver::kMaxKeptArgumentBytes + 1, 'x')});
  receiver.Recycle(std::move(big));
  CHECK(receiver.TEST_kept_records() == 0);  // destroyed, not kept
  receiver.Recycle(nullptr);
  CHECK(receiver.TEST_kept_records() == 0);
  for (size_t i = 0; i < TaskReceiver::kMaxKeptRecords + 3; ++i) {
    receiver.Recycle(std::make_unique<TaskToRun>());
  }
  CHECK(receiver.TEST_kept_records() == TaskReceiver::kMaxKeptRecords);
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

// Waits up to `limit` for `done`; whether it held.
template <typename Pred>
bool WaitUntil(Pred done, std::chrono::milliseconds limit = std::chrono::seconds(10)) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::yield();
  }
  return true;
}

TEST_CASE("an idle Take sleeps untimed until a task arrives", "[worker][receiver]") {
  // Invariant: a Take with nothing queued blocks without a timeout and
  // without waking: over 500 ms idle it neither returns nor re-checks its
  // condition (the old 200 ms timed wait returned and woke 2-3 times). A task
  // pushed from another thread (the io thread's Receive) is returned by it.
  TaskReceiver receiver;
  auto taken = std::async(std::launch::async, [&] { return receiver.Take(); });
  REQUIRE(WaitUntil(
      [&] { return receiver.TEST_waiting() == 1 && receiver.TEST_wait_checks() >= 1; }));
  // Entering the wait evaluates the condition once or twice; then none.
  CHECK(taken.wait_for(std::chrono::milliseconds(300)) == std::future_status::timeout);
  const uint64_t checks = receiver.TEST_wait_checks();
  CHECK(checks <= 2);
  CHECK(taken.wait_for(std::chrono::milliseconds(500)) == std::future_status::timeout);
  CHECK(receiver.TEST_wait_checks() == checks);
  TaskId id = TaskId::Random();
  REQUIRE(receiver.Receive(NewTask(id)) == nullptr);
  REQUIRE(taken.wait_for(std::chrono::seconds(10)) == std::future_status::ready);
  auto task = taken.get();
  REQUIRE(task != nullptr);
  CHECK(task->task_id == id);
  CHECK(receiver.TEST_waiting() == 0);
}

TEST_CASE("Stop returns every blocked Take and each later one", "[worker][receiver]") {
  // Invariant: Stop from another thread wakes all threads blocked in Take
  // (a concurrent actor has several) and they return null; a Take after Stop
  // returns null at once, even with tasks queued (the worker is ending).
  TaskReceiver receiver;
  receiver.BecomeActor();
  auto first = std::async(std::launch::async, [&] { return receiver.Take(); });
  auto second = std::async(std::launch::async, [&] { return receiver.Take(); });
  REQUIRE(WaitUntil([&] { return receiver.TEST_waiting() == 2; }));
  std::thread stopper([&] { receiver.Stop(); });
  stopper.join();
  REQUIRE(first.wait_for(std::chrono::seconds(10)) == std::future_status::ready);
  REQUIRE(second.wait_for(std::chrono::seconds(10)) == std::future_status::ready);
  CHECK(first.get() == nullptr);
  CHECK(second.get() == nullptr);
  REQUIRE(receiver.Receive(NewTask(TaskId::Random())) == nullptr);
  CHECK(receiver.Take() == nullptr);
  CHECK(receiver.TryTake() == nullptr);
}

TEST_CASE("an exiting actor's blocked threads take nothing more", "[worker][receiver]") {
  // Invariant: once the actor exits after its current call, a call arriving
  // or still queued does not wake a blocked Take into running it; the
  // thread sleeps until Stop (no spinning on the queued call).
  TaskReceiver receiver;
  receiver.BecomeActor();
  REQUIRE(receiver.Receive(NewTask(TaskId::Random())) == nullptr);
  receiver.StopAfterCurrent();
  auto taken = std::async(std::launch::async, [&] { return receiver.Take(); });
  REQUIRE(WaitUntil(
      [&] { return receiver.TEST_waiting() == 1 && receiver.TEST_wait_checks() >= 1; }));
  CHECK(taken.wait_for(std::chrono::milliseconds(200)) == std::future_status::timeout);
  const uint64_t checks = receiver.TEST_wait_checks();
  CHECK(taken.wait_for(std::chrono::milliseconds(300)) == std::future_status::timeout);
  CHECK(receiver.TEST_wait_checks() == checks);
  receiver.Stop();
  REQUIRE(taken.wait_for(std::chrono::seconds(10)) == std::future_status::ready);
  CHECK(taken.get() == nullptr);
}

}  // namespace
}  // namespace lumen::runtime
