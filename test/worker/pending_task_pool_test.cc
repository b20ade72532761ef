// PendingTaskPool: a finished task's record is reused as new, releasing what
// it must release when handed back; the pool's bounds hold.
#include "core/worker/pending_task_pool.h"

#include <memory>
#include <string>

#include <catch2/catch.hpp>

namespace lumen::runtime {
namespace {

std::shared_ptr<internal::RefHandle> Ref() {
  return std::make_shared<internal::RefHandle>(ObjectId::ForTaskReturn(TaskId::Random(), 1),
                                               std::string("unix:/tmp/owner"));
}

TEST_CASE("PendingTaskPool reuses a finished record as new and releases its refs at once",
          "[worker][task_pool]") {
  // Invariant: Give drops the argument refs and the actor handle then (the
  // objects may be freed as when the record was destroyed); Take returns the
  // same record with every field at its default.
  PendingTaskPool pool;
  std::unique_ptr<PendingTask> task = pool.Take();
  REQUIRE(task != nullptr);
  PendingTask* record = task.get();
  auto argument = Ref();
  auto actor = Ref();
  std::weak_ptr<internal::RefHandle> argument_alive = argument, actor_alive = actor;
  task->function = "a_function_name_longer_than_the_short_string_buffer";
  task->display_name = "named";
  task->attempt = 3;
  task->retries_left = 2;
  task->cancelled = true;
  task->submitted_tick = 99;
  task->args.push_back({"value", std::move(argument)});
  task->actor = std::move(actor);
  task->placement = std::make_unique<TaskPlacement>();
  pool.Give(std::move(task));
  CHECK(argument_alive.expired());
  CHECK(actor_alive.expired());
  CHECK(pool.kept() == 1);

  std::unique_ptr<PendingTask> again = pool.Take();
  CHECK(again.get() == record);
  CHECK(pool.kept() == 0);
  CHECK(again->function.empty());
  CHECK(again->display_name.empty());
  CHECK(again->attempt == 0);
  CHECK(again->retries_left == 0);
  CHECK_FALSE(again->cancelled);
  CHECK(again->submitted_tick == 0);
  CHECK(again->args.empty());
  CHECK(again->actor == nullptr);
  CHECK(again->placement == nullptr);
  CHECK(again->task_id == TaskId());
  // Empty again: a new record.
  CHECK(pool.Take().get() != record);
}

TEST_CASE("PendingTaskPool keeps at most kMaxKept records, none holding large values",
          "[worker][task_pool]") {
  PendingTaskPool pool;
  auto big = std::make_unique<PendingTask>();
  auto argument = Ref();
  std::weak_ptr<internal::RefHandle> alive = argument;
  big->args.push_back({std::string(PendingTaskPool::kMaxKeptArgumentBytes + 1, 'x'),
                       std::move(argument)});
  pool.Give(std::move(big));
  CHECK(pool.kept() == 0);  // destroyed, not kept
  CHECK(alive.expired());
  pool.Give(nullptr);
  CHECK(pool.kept() == 0);
  for (size_t i = 0; i < PendingTaskPool::kMaxKept + 5; ++i) {
    pool.Give(std::make_unique<PendingTask>());
  }
  CHECK(pool.kept() == PendingTaskPool::kMaxKept);
}

TEST_CASE("PendingTaskPool sends a queued task's placement back inside the next record",
          "[worker][task_pool]") {
  // Invariant: a placement given back waits (at most kMaxKept) until a record
  // is given, rides in it, and is destroyed by the Take that resets the record
  // (on the thread that made it), never handed out.
  PendingTaskPool pool;
  auto placement = std::make_unique<TaskPlacement>();
  placement->resources = {{"a_resource_name_longer_than_the_short_string_buffer", 2.0}};
  placement->queue_key = "a queue key longer than the short string buffer";
  pool.GivePlacement(std::move(placement));
  pool.GivePlacement(nullptr);
  CHECK(pool.placements_waiting() == 1);
  pool.Give(std::make_unique<PendingTask>());
  CHECK(pool.placements_waiting() == 0);
  CHECK(pool.kept() == 1);
  std::unique_ptr<PendingTask> record = pool.Take();
  CHECK(record->placement == nullptr);
  CHECK(pool.kept() == 0);
  // No record to carry them: bounded.
  for (size_t i = 0; i < PendingTaskPool::kMaxKept + 5; ++i) {
    pool.GivePlacement(std::make_unique<TaskPlacement>());
  }
  CHECK(pool.placements_waiting() == PendingTaskPool::kMaxKept);
}

}  // namespace
}  // namespace lumen::runtime
