// Deterministic tests of ObjectRecovery (lineage reconstruction): tasks and
// values made by the test, a real ObjectTable, MemoryStore and TaskManager,
// and a resubmit callback that records what would run again; no processes,
// no sockets.
#include "core/worker/object_recovery.h"

#include <capnp/message.h>

#include <memory>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "lumen/common/proto_util.h"

namespace lumen::runtime {
namespace {

struct RecoveryRig {
  explicit RecoveryRig(uint64_t cap = ObjectRecovery::kDefaultMaxLineageBytes)
      : recovery(table, tasks, {.max_lineage_bytes = cap},
                 {.resubmit = [this](std::unique_ptr<PendingTask> task) {
                   // What the runtime would see when the task goes out again.
                   pending_at_resubmit.push_back(AllPending());
                   resubmitted.push_back(std::move(task));
                 }}) {
    tasks.SetLineageSink(
        [this](std::unique_ptr<PendingTask> task) { recovery.KeepLineage(std::move(task)); });
  }

  ObjectTable table;
  MemoryStore store{table,
                    {.run_on_ready = [](const ObjectId&, std::vector<std::function<void()>>) {},
                     .delete_orphan_copies = [](const ObjectId&, std::vector<std::string>) {},
                     .request_from_owner = [](const ObjectId&, const std::string&) {},
                     .notify_blocked = [](bool) {}}};
  TaskManager tasks{store};
  std::vector<std::unique_ptr<PendingTask>> resubmitted;
  std::vector<bool> pending_at_resubmit;  // per resubmission: every lost object pending then
  std::vector<ObjectId> watched;          // the objects AllPending looks at
  ObjectRecovery recovery;

  // A submitted normal task whose return object the test references.
  std::unique_ptr<PendingTask> NewTask(const std::string& name, int max_retries) {
    auto task = std::make_unique<PendingTask>();
    task->task_id = TaskId::Random();
    task->return_id = ObjectId::ForTaskReturn(task->task_id, 1);
    task->function = name;
    task->max_retries = task->retries_left = max_retries;
    task->placement = std::make_unique<TaskPlacement>();
    task->placement->resources["CPU"] = 1;
    task->placement->queue_key = "CPU=1";
    ObjectTable::Locked objects(table);
    ObjectEntry& e = (*objects)[task->return_id];
    e.owned = true;
    e.local_refs = 1;
    return task;
  }
  // The task ran and stored its result on `node`; the submitter hands it on.
  void CompleteStored(std::unique_ptr<PendingTask> task, const NodeId& node) {
    capnp::MallocMessageBuilder message;
    auto value = message.initRoot<proto::Value>();
    auto stored = value.initStored();
    stored.setSize(1 << 20);
    stored.setNodeId(DataOf(node));
    stored.setNodeAddress("node-address");
    tasks.Complete(*task, value.asReader());
    tasks.KeepLineage(std::move(task));
  }
  // A Put object (stored, no lineage).
  ObjectId NewPut(const NodeId& node) {
    ObjectId id = ObjectId::ForPut();
    ObjectTable::Locked objects(table);
    ObjectEntry& e = (*objects)[id];
    e.owned = true;
    e.local_refs = 1;
    e.kind = ObjectEntry::Kind::kStored;
    e.locations = {{node, "node-address"}};
    e.ready = true;
    return id;
  }
  const ObjectEntry& Entry(const ObjectId& id) {
    ObjectTable::Locked objects(table);
    return *objects->find_value(id);  // stable: node_hash_map
  }
  bool AllPending() {
    ObjectTable::Locked objects(table);
    for (const ObjectId& id : watched) {
      if (objects->find_value(id)->ready) return false;
    }
    return true;
  }
  std::string FailureOf(const ObjectId& id) {
    const ObjectEntry& e = Entry(id);
    if (!e.ready || e.kind != ObjectEntry::Kind::kFailed) return "(not failed)";
    return e.failure->message;
  }
};

TEST_CASE("a lost result whose task may retry runs again as the same task, and is kept again",
          "[worker][recovery]") {
  // Invariant: when every copy of a stored task result is lost and its task
  // has retries left, the object becomes pending again and the same task (same
  // task id, same return id, placement kept) is resubmitted once, using one
  // retry (attempt + 1); its lineage is taken while it runs and kept again
  // once it completes; the object then reads the new copy's location.
  RecoveryRig rig;
  const NodeId dead = NodeId::Random(), alive = NodeId::Random();
  auto task = rig.NewTask("Produce", 2);
  const TaskId task_id = task->task_id;
  const ObjectId id = task->return_id;
  rig.CompleteStored(std::move(task), dead);
  REQUIRE(rig.recovery.kept() == 1);
  CHECK(rig.recovery.kept_bytes() >= sizeof(PendingTask));

  REQUIRE(rig.recovery.OnLost({id}, "its only copy was on node X, which died") == 1);
  CHECK_FALSE(rig.Entry(id).ready.load());
  CHECK(rig.Entry(id).locations.empty());
  REQUIRE(rig.resubmitted.size() == 1);
  PendingTask& again = *rig.resubmitted[0];
  CHECK(again.task_id == task_id);
  CHECK(again.return_id == id);
  CHECK(again.attempt == 1);
  CHECK(again.retries_left == 1);
  REQUIRE(again.placement);
  CHECK(again.placement->queue_key == "CPU=1");
  CHECK(rig.recovery.kept() == 0);
  CHECK(rig.recovery.kept_bytes() == 0);

  rig.CompleteStored(std::move(rig.resubmitted[0]), alive);
  REQUIRE(rig.Entry(id).ready.load());
  REQUIRE(rig.Entry(id).locations.size() == 1);
  CHECK(rig.Entry(id).locations[0].first == alive);
  CHECK(rig.recovery.kept() == 1);
}

TEST_CASE("a chain lost together: every object is pending before any task goes out again",
          "[worker][recovery]") {
  // Invariant: when a chain's objects are lost together (a -> b, both only on
  // the dead node), both become pending before either task is resubmitted,
  // so b's rerun waits for a's rerun instead of failing on a lost argument;
  // each task is resubmitted exactly once.
  RecoveryRig rig;
  const NodeId dead = NodeId::Random();
  auto a = rig.NewTask("a", 3);
  auto b = rig.NewTask("b", 3);
  const ObjectId a_id = a->return_id, b_id = b->return_id;
  auto a_ref = std::make_shared<internal::RefHandle>(a_id, std::string("me"));
  b->args.push_back(internal::TaskArgument{"", a_ref});
  rig.CompleteStored(std::move(a), dead);
  rig.CompleteStored(std::move(b), dead);
  rig.watched = {a_id, b_id};

  REQUIRE(rig.recovery.OnLost({b_id, a_id}, "its only copy was on node X, which died") == 2);
  REQUIRE(rig.resubmitted.size() == 2);
  CHECK(rig.pending_at_resubmit == std::vector<bool>{true, true});
  CHECK(rig.resubmitted[0]->return_id == b_id);
  CHECK(rig.resubmitted[1]->return_id == a_id);
  // b's rerun still holds its argument.
  REQUIRE(rig.resubmitted[0]->args.size() == 1);
  CHECK(rig.resubmitted[0]->args[0].ref == a_ref);
}

TEST_CASE("what cannot be rebuilt fails with ObjectLostError saying why", "[worker][recovery]") {
  // Invariant: a lost object whose lineage cannot run again fails (not
  // pending, nothing resubmitted) with an ObjectLostError message naming the
  // cause of the loss and the reason: made by Put, an actor call's result,
  // max_retries=0, retries used up by earlier rebuilds, a cancelled task, or
  // a task that may only run on the dead node (hard NodeAffinity).
  RecoveryRig rig;
  const NodeId dead = NodeId::Random();
  const std::string why = "its only copy was on node DEAD, which died";

  ObjectId put = rig.NewPut(dead);
  auto no_retries = rig.NewTask("NoRetries", 0);
  ObjectId no_retries_id = no_retries->return_id;
  rig.CompleteStored(std::move(no_retries), dead);
  auto call = rig.NewTask("Method", 3);
  call->kind = proto::TaskKind::ACTOR_METHOD;
  ObjectId call_id = call->return_id;
  rig.CompleteStored(std::move(call), dead);
  auto cancelled = rig.NewTask("Cancelled", 3);
  cancelled->cancelled = true;
  ObjectId cancelled_id = cancelled->return_id;
  {
    // A cancelled task's object failed already; here it got a value first.
    rig.CompleteStored(std::move(cancelled), dead);
  }
  auto pinned = rig.NewTask("Pinned", 3);
  pinned->placement->scheduling.kind = internal::SchedulingOptions::Kind::kNodeAffinity;
  pinned->placement->scheduling.node = dead;
  ObjectId pinned_id = pinned->return_id;
  rig.CompleteStored(std::move(pinned), dead);
  auto once = rig.NewTask("Once", 1);
  ObjectId once_id = once->return_id;
  rig.CompleteStored(std::move(once), dead);
  CHECK(rig.recovery.kept() == 2);  // Pinned and Once

  // Once is rebuilt (its one retry), then lost again: its retries are spent.
  REQUIRE(rig.recovery.OnLost({put, no_retries_id, call_id, cancelled_id, pinned_id, once_id}, why,
                              dead) == 1);
  REQUIRE(rig.resubmitted.size() == 1);
  rig.CompleteStored(std::move(rig.resubmitted[0]), dead);
  CHECK(rig.recovery.kept() == 0);
  REQUIRE(rig.recovery.OnLost({once_id}, why) == 0);
  CHECK(rig.resubmitted.size() == 1);

  for (const ObjectId& id : {put, no_retries_id, call_id, cancelled_id, pinned_id, once_id}) {
    INFO(rig.FailureOf(id));
    CHECK(rig.FailureOf(id).find(why) != std::string::npos);
    CHECK(rig.FailureOf(id).find("cannot be rebuilt") != std::string::npos);
    CHECK(rig.Entry(id).failure->kind == proto::FailureKind::OBJECT_LOST);
  }
  CHECK(rig.FailureOf(put).find("made by Put") != std::string::npos);
  CHECK(rig.FailureOf(no_retries_id).find("max_retries=0") != std::string::npos);
  CHECK(rig.FailureOf(call_id).find("actor call") != std::string::npos);
  CHECK(rig.FailureOf(cancelled_id).find("cancelled") != std::string::npos);
  CHECK(rig.FailureOf(once_id).find("used up its retries") != std::string::npos);
  CHECK(rig.FailureOf(pinned_id).find("soft=false") != std::string::npos);
}

TEST_CASE("lineage is released when its object is freed, and the oldest goes over the cap",
          "[worker][recovery]") {
  // Invariants: Forget of a freed object releases its kept task (and so the
  // task's argument refs) and its bytes; with a cap of two tasks' bytes, a
  // third kept task releases the oldest, whose loss then fails naming
  // LUMEN_MAX_LINEAGE_BYTES; an inline result keeps no lineage at all.
  const NodeId dead = NodeId::Random();
  uint64_t one;
  {
    RecoveryRig probe;
    auto t = probe.NewTask("t0", 3);
    one = ObjectRecovery::EstimateBytes(*t);
  }
  RecoveryRig rig(2 * one + one / 2);
  std::vector<ObjectId> ids;
  auto arg = std::make_shared<internal::RefHandle>(ObjectId::ForPut(), std::string("me"));
  for (int i = 0; i < 3; ++i) {
    auto t = rig.NewTask("t" + std::to_string(i), 3);
    if (i == 1) t->args.push_back(internal::TaskArgument{"", arg});
    ids.push_back(t->return_id);
    rig.CompleteStored(std::move(t), dead);
  }
  CHECK(rig.recovery.kept() == 2);
  CHECK(rig.recovery.kept_bytes() <= 2 * one + one / 2);
  CHECK(arg.use_count() == 2);  // t1 holds it

  rig.recovery.Forget(ids[1]);
  CHECK(rig.recovery.kept() == 1);
  CHECK(arg.use_count() == 1);  // released with t1's lineage
  rig.recovery.Forget(ids[2]);
  CHECK(rig.recovery.kept() == 0);
  CHECK(rig.recovery.kept_bytes() == 0);

  REQUIRE(rig.recovery.OnLost({ids[0]}, "lost") == 0);
  CHECK(rig.FailureOf(ids[0]).find("LUMEN_MAX_LINEAGE_BYTES") != std::string::npos);

  // An inline result is never lost with a node: nothing is kept for it.
  auto inline_task = rig.NewTask("small", 3);
  capnp::MallocMessageBuilder message;
  auto value = message.initRoot<proto::Value>();
  value.setInline(capnp::Data::Reader(reinterpret_cast<const uint8_t*>("x"), 1));
  rig.tasks.Complete(*inline_task, value.asReader());
  rig.tasks.KeepLineage(std::move(inline_task));
  CHECK(rig.recovery.kept() == 0);
}

}  // namespace
}  // namespace lumen::runtime
