// TaskEventRecorder (the per-process ring) and the wire form of its events.
#include "lumen/common/task_events.h"

#include <unistd.h>

#include <capnp/serialize.h>

#include <catch2/catch.hpp>
#include <algorithm>
#include <cstring>
#include <map>
#include <thread>
#include <vector>

#include "lumen/common/connection.h"
#include "lumen/common/task_event_packed.h"
#include "lumen/common/task_event_wire.h"

namespace lumen {
namespace {

// Invariant: Drain returns what was recorded since the last Drain, oldest
// first; a full ring keeps the newest events and counts the ones it dropped.
TEST_CASE("the task event ring keeps the newest events and counts the dropped") {
  TaskEventRecorder recorder(/*capacity=*/3);
  TaskId a = TaskId::Random(), b = TaskId::Random();
  recorder.Record(TaskEventKind::kSubmitted, a, 0, "first");
  recorder.Record(TaskEventKind::kDependenciesReady, a, 0);
  auto two = recorder.Drain();
  REQUIRE(two.size() == 2);
  CHECK(two[0].kind == TaskEventKind::kSubmitted);
  CHECK(two[0].name == "first");
  CHECK(two[0].pid > 0);
  CHECK(two[0].time_us > 0);
  CHECK(two[1].time_us >= two[0].time_us);
  CHECK(recorder.Drain().empty());

  for (uint32_t attempt = 0; attempt < 5; ++attempt) {
    recorder.Record(TaskEventKind::kStarted, b, attempt, "f", {.worker_pid = 7});
  }
  auto kept = recorder.Drain();
  REQUIRE(kept.size() == 3);
  CHECK(kept[0].attempt == 2);
  CHECK(kept[2].attempt == 4);
  CHECK(kept[2].worker_pid == 7);
  CHECK(recorder.dropped() == 2);
}

// Invariant: a name longer than a slot holds is kept whole, however often a
// thread repeats it between drains (an actor's method: the slots share it)
// and when other long names come between.
TEST_CASE("long task event names stay whole when a thread repeats them between drains") {
  const std::string method = "&my_project::models::ParameterServer::ApplyGradients";
  const std::string other = "&my_project::models::ParameterServer::PullWeights";
  REQUIRE(method.size() > TaskEventRecorder::kInlineName);
  REQUIRE(other.size() > TaskEventRecorder::kInlineName);
  // More than the 65,535 distinct long names a drain period indexes: before
  // the slots shared a repeated name, the ones past that were cut to a slot.
  constexpr size_t kEvents = 70000;
  TaskEventRecorder recorder(/*capacity=*/kEvents + 8);
  const TaskId task = TaskId::Random();
  for (size_t i = 0; i < kEvents; ++i) {
    recorder.Record(TaskEventKind::kStarted, task, static_cast<uint32_t>(i), method);
  }
  recorder.Record(TaskEventKind::kStarted, task, 0, other);
  recorder.Record(TaskEventKind::kStarted, task, 1, method);
  recorder.Record(TaskEventKind::kStarted, task, 2, "short");
  recorder.Record(TaskEventKind::kStarted, task, 3, method);
  std::vector<TaskEvent> events = recorder.Drain();
  REQUIRE(events.size() == kEvents + 4);
  size_t whole = 0;
  for (size_t i = 0; i < kEvents; ++i) whole += events[i].name == method;
  CHECK(whole == kEvents);
  CHECK(events[kEvents].name == other);
  CHECK(events[kEvents + 1].name == method);
  CHECK(events[kEvents + 2].name == "short");
  CHECK(events[kEvents + 3].name == method);
  CHECK(recorder.dropped() == 0);
  // After the drain the names are the new period's own.
  recorder.Record(TaskEventKind::kStarted, task, 0, other);
  events = recorder.Drain();
  REQUIRE(events.size() == 1);
  CHECK(events[0].name == other);
}

// Invariant: the ring grows on demand (it is not allocated up front), also
// after a Drain left it partly grown, and still keeps the newest in order.
TEST_CASE("the task event ring grows after a drain and then wraps in order") {
  TaskEventRecorder recorder(/*capacity=*/4);
  TaskId t = TaskId::Random();
  recorder.Record(TaskEventKind::kStarted, t, 100);
  recorder.Record(TaskEventKind::kStarted, t, 101);
  REQUIRE(recorder.Drain().size() == 2);
  for (uint32_t attempt = 0; attempt < 6; ++attempt) recorder.Record(TaskEventKind::kStarted, t, attempt);
  auto kept = recorder.Drain();
  REQUIRE(kept.size() == 4);
  for (uint32_t i = 0; i < 4; ++i) CHECK(kept[i].attempt == i + 2);
  CHECK(recorder.dropped() == 2);
}

// Invariant: events recorded by several threads (each into its own ring) all
// come out of one Drain, merged by time, each thread's in the order it
// recorded them; the rings of threads that ended are drained before they are
// retired, and what they dropped stays counted.
TEST_CASE("task events of several threads are drained merged by time") {
  TaskEventRecorder recorder(/*capacity=*/1500);
  constexpr int kThreads = 4, kEach = 300;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&recorder, t] {
      TaskId id = TaskId::Random();
      for (int i = 0; i < kEach; ++i) recorder.Record(TaskEventKind::kStarted, id, t * 10000 + i);
    });
  }
  for (auto& t : threads) t.join();
  auto all = recorder.Drain();
  REQUIRE(all.size() == kThreads * kEach);
  std::map<uint32_t, uint32_t> last_of_thread;  // thread -> last attempt seen
  for (size_t i = 0; i < all.size(); ++i) {
    if (i > 0) CHECK(all[i].time_us >= all[i - 1].time_us);
    uint32_t thread = all[i].attempt / 10000, n = all[i].attempt % 10000;
    if (last_of_thread.contains(thread)) CHECK(n == last_of_thread[thread] + 1);
    last_of_thread[thread] = n;
  }
  CHECK(last_of_thread.size() == kThreads);
  CHECK(recorder.dropped() == 0);

  // A thread that overfills its ring, then ends before the Drain.
  std::thread([&recorder] {
    for (uint32_t i = 0; i < 1505; ++i) recorder.Record(TaskEventKind::kStarted, TaskId::Nil(), i);
  }).join();
  auto kept = recorder.Drain();
  REQUIRE(kept.size() == 1500);
  CHECK(kept.front().attempt == 5);
  CHECK(recorder.dropped() == 5);
  CHECK(recorder.Drain().empty());
  CHECK(recorder.dropped() == 5);

  // Two threads of 1000 each: one Drain gives the newest 1500 of them all.
  std::thread first([&recorder] {
    for (uint32_t i = 0; i < 1000; ++i) recorder.Record(TaskEventKind::kStarted, TaskId::Nil(), i);
  });
  first.join();
  std::thread([&recorder] {
    for (uint32_t i = 0; i < 1000; ++i) recorder.Record(TaskEventKind::kStarted, TaskId::Nil(), 1000 + i);
  }).join();
  auto newest = recorder.Drain();
  REQUIRE(newest.size() == 1500);
  CHECK(newest.front().attempt == 500);
  CHECK(newest.back().attempt == 1999);
  CHECK(recorder.dropped() == 5 + 500);
}

// Invariant: draining while threads record loses nothing and duplicates
// nothing: every event is drained exactly once or counted as dropped. (A
// stress test of the per-thread rings' swap; LUMEN_TEST_SEED is not used: the
// interleaving is the scheduler's.)
TEST_CASE("draining while threads record loses and duplicates no event") {
  TaskEventRecorder recorder(/*capacity=*/256);
  constexpr int kThreads = 3, kEach = 20000;
  std::atomic<int> running{kThreads};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&recorder, &running, t] {
      for (int i = 0; i < kEach; ++i) recorder.Record(TaskEventKind::kStarted, TaskId::Nil(), t * kEach + i);
      running.fetch_sub(1);
    });
  }
  std::vector<int> seen(kThreads * kEach, 0);
  auto take = [&] {
    for (const TaskEvent& e : recorder.Drain()) ++seen.at(e.attempt);
  };
  while (running.load() > 0) take();
  for (auto& t : threads) t.join();
  take();
  uint64_t drained = 0, duplicated = 0;
  for (int n : seen) {
    duplicated += n > 1;
    drained += n;
  }
  CHECK(duplicated == 0);
  CHECK(drained + recorder.dropped() == kThreads * kEach);
}

TEST_CASE("a disabled task event recorder records nothing") {
  TaskEventRecorder recorder(8, /*enabled=*/false);
  recorder.Record(TaskEventKind::kSubmitted, TaskId::Random(), 0, "x");
  CHECK(recorder.Drain().empty());
  recorder.SetEnabled(true);
  recorder.Record(TaskEventKind::kSubmitted, TaskId::Random(), 0, "x");
  CHECK(recorder.Drain().size() == 1);
}

TEST_CASE("task events survive the wire unchanged") {
  TaskEvent pull{.kind = TaskEventKind::kPull, .pid = 42, .time_us = 1000, .name = "obj",
                 .node = NodeId::Random(), .bytes = 1 << 20, .duration_us = 250};
  TaskEvent lease{.kind = TaskEventKind::kLeaseGranted, .actor_call = true, .attempt = 3,
                  .pid = 43, .time_us = 2000, .task_id = TaskId::Random(),
                  .worker = WorkerId::Random(), .worker_pid = 99};
  OutMessage out;
  auto batch = out.Init().initTaskEvents();
  TaskEventsToProto({pull, lease}, batch);
  auto decoded = TaskEventsFromProto(batch.asReader());
  REQUIRE(decoded.ok());
  auto& back = *decoded;
  REQUIRE(back.size() == 2);
  CHECK(back[0].kind == TaskEventKind::kPull);
  CHECK(back[0].name == "obj");
  CHECK(back[0].node == pull.node);
  CHECK(back[0].bytes == pull.bytes);
  CHECK(back[0].duration_us == 250);
  CHECK(back[0].task_id.IsNil());
  CHECK(back[1].actor_call);
  CHECK(back[1].attempt == 3);
  CHECK(back[1].task_id == lease.task_id);
  CHECK(back[1].worker == lease.worker);
  CHECK(back[1].worker_pid == 99);
  CHECK(back[1].pid == 43);
  CHECK(back[1].time_us == 2000);
}

// Invariant: an event's time is the system clock when it was recorded (the
// TSC ticks converted at the drain land between system-clock readings taken
// around the Record, to the microsecond), also for a ring drained much later.
TEST_CASE("task event times are the system clock, whichever clock stamps them") {
  INFO("TSC clock: " << TaskEventClock::UsesTsc());
  TaskEventRecorder recorder(16);
  std::vector<std::pair<int64_t, int64_t>> windows;
  for (int i = 0; i < 5; ++i) {
    int64_t before = TaskEventRecorder::NowMicros();
    recorder.Record(TaskEventKind::kStarted, TaskId::Random(), static_cast<uint32_t>(i));
    int64_t after = TaskEventRecorder::NowMicros();
    windows.emplace_back(before, after);
    // Spread the events over ~5 ms so that a wrong rate would show.
    while (TaskEventRecorder::NowMicros() < after + 1000) {
    }
  }
  auto events = recorder.Drain();
  REQUIRE(events.size() == 5);
  for (size_t i = 0; i < events.size(); ++i) {
    INFO("event " << i << " at " << events[i].time_us << ", window " << windows[i].first << ".."
                  << windows[i].second);
    CHECK(events[i].time_us >= windows[i].first - 1);
    CHECK(events[i].time_us <= windows[i].second + 1);
  }
}

// Invariant: a FINISHED given the tick its SUBMITTED returned carries the
// latency between them in microseconds; one without carries none.
TEST_CASE("a finished task event carries its latency from the submitted tick") {
  TaskEventRecorder recorder(16);
  TaskId t = TaskId::Random();
  uint64_t submitted = recorder.Record(TaskEventKind::kSubmitted, t, 0, "f");
  REQUIRE(submitted != 0);
  int64_t start = TaskEventRecorder::NowMicros();
  while (TaskEventRecorder::NowMicros() < start + 3000) {
  }
  recorder.Record(TaskEventKind::kFinished, t, 0, {}, {.since_tick = submitted});
  recorder.Record(TaskEventKind::kFinished, TaskId::Random(), 0);
  auto events = recorder.Drain();
  REQUIRE(events.size() == 3);
  CHECK(events[1].duration_us == events[1].time_us - events[0].time_us);
  CHECK(events[1].duration_us >= 3000);
  CHECK(events[2].duration_us == 0);
  TaskEventRecorder off(16, /*enabled=*/false);
  CHECK(off.Record(TaskEventKind::kSubmitted, t, 0) == 0);
}

// Invariant: the packed form keeps every field of every kind, names longer
// than a slot's inline bytes included (recorded, drained, decoded).
TEST_CASE("packed task events keep every field, long names included") {
  TaskEventRecorder recorder(16);
  std::string long_error(200, 'e');
  long_error[199] = '!';
  TaskId t = TaskId::Random();
  NodeId node = NodeId::Random();
  WorkerId worker = WorkerId::Random();
  recorder.Record(TaskEventKind::kFailed, t, 2, long_error, {.actor_call = true});
  recorder.Record(TaskEventKind::kLeaseGranted, t, 2, {}, {.node = node, .worker = worker, .worker_pid = 77});
  recorder.RecordEvent(TaskEvent{.kind = TaskEventKind::kPull, .time_us = 12345, .name = std::string(64, 'a'),
                                 .node = node, .bytes = 99, .duration_us = 5});
  std::string records;
  REQUIRE(recorder.DrainPacked(&records) == 3);
  auto back = packed_events::Decode(records);
  REQUIRE(back.ok());
  REQUIRE(back->size() == 3);
  // One thread's events come in the order it recorded them.
  const TaskEvent& pull = (*back)[2];
  CHECK(pull.kind == TaskEventKind::kPull);
  CHECK(pull.time_us == 12345);
  CHECK(pull.name == std::string(64, 'a'));
  CHECK(pull.bytes == 99);
  CHECK(pull.duration_us == 5);
  CHECK(pull.node == node);
  CHECK(pull.task_id.IsNil());
  CHECK(pull.pid == static_cast<int32_t>(::getpid()));
  const TaskEvent& failed = (*back)[0];
  CHECK(failed.kind == TaskEventKind::kFailed);
  CHECK(failed.name == long_error);
  CHECK(failed.actor_call);
  CHECK(failed.attempt == 2);
  CHECK(failed.task_id == t);
  const TaskEvent& lease = (*back)[1];
  CHECK(lease.node == node);
  CHECK(lease.worker == worker);
  CHECK(lease.worker_pid == 77);
  CHECK_FALSE(lease.actor_call);
  CHECK(lease.name.empty());
}

// Invariant: the events a process folds into a task's closing record
// (DEPENDENCIES_READY and LEASE_GRANTED into FINISHED/FAILED, ARGS_FETCHED and
// EXECUTED into RESULT_STORED) come out of a drain as events of their own, in
// time order before the record's, with the lease's node and worker pid on the
// LEASE_GRANTED and not on the FINISHED; a tick of 0 is an event that did not
// happen. The node's buffer counts them by kind, one record each.
TEST_CASE("folded task events read back as events of their own") {
  TaskEventRecorder recorder(16);
  TaskId t = TaskId::Random();
  NodeId node = NodeId::Random();
  const int64_t before = TaskEventRecorder::NowMicros();
  const uint64_t submitted = recorder.Record(TaskEventKind::kSubmitted, t, 1, "f");
  const uint64_t ready = recorder.Tick();
  const uint64_t lease = recorder.Tick();
  REQUIRE(ready != 0);
  recorder.Record(TaskEventKind::kFinished, t, 1, {},
                  {.node = node, .worker_pid = 42, .actor_call = true, .since_tick = submitted,
                   .earlier_ticks = {ready, lease}});
  const uint64_t executed = recorder.Tick();
  recorder.Record(TaskEventKind::kResultStored, t, 1, {}, {.earlier_ticks = {0, executed}});
  const int64_t after = TaskEventRecorder::NowMicros();
  std::string records;
  REQUIRE(recorder.DrainPacked(&records) == 3);  // records
  auto back = packed_events::Decode(records);
  REQUIRE(back.ok());
  REQUIRE(back->size() == 6);  // events
  std::vector<TaskEventKind> kinds;
  for (const TaskEvent& e : *back) kinds.push_back(e.kind);
  CHECK(kinds == std::vector<TaskEventKind>{TaskEventKind::kSubmitted, TaskEventKind::kDependenciesReady,
                                            TaskEventKind::kLeaseGranted, TaskEventKind::kFinished,
                                            TaskEventKind::kExecuted, TaskEventKind::kResultStored});
  for (size_t i = 0; i < back->size(); ++i) {
    INFO("event " << i);
    const TaskEvent& e = (*back)[i];
    CHECK(e.task_id == t);
    CHECK(e.attempt == 1);
    CHECK(e.pid == static_cast<int32_t>(::getpid()));
    CHECK(e.time_us >= before - 1);
    CHECK(e.time_us <= after + 1);
    if (i > 0) CHECK(e.time_us >= (*back)[i - 1].time_us);
    CHECK(e.actor_call == (i >= 1 && i <= 3));
  }
  const TaskEvent& granted = (*back)[2];
  CHECK(granted.node == node);
  CHECK(granted.worker_pid == 42);
  const TaskEvent& finished = (*back)[3];
  CHECK(finished.node.IsNil());
  CHECK(finished.worker_pid == 0);
  CHECK(finished.duration_us >= 1);
  CHECK(finished.duration_us <= after - before + 1);

  size_t events = 0, count = 0;
  REQUIRE(packed_events::ForEach(records, [](const packed_events::View&) {}, &events, &count).ok());
  CHECK(events == 6);
  CHECK(count == 3);
  // Two flushes joined end to end (as a node answers `lumen timeline`) read
  // back as both.
  auto twice = packed_events::Decode(records + records);
  REQUIRE(twice.ok());
  REQUIRE(twice->size() == 12);
  CHECK((*twice)[6].time_us == (*back)[0].time_us);
  CHECK((*twice)[9].duration_us == finished.duration_us);
}

// Invariant: the record that ends a part takes over its start's record
// (TaskEventDetail::start) while no drain took it, and reads back as the same
// events as the two records would: SUBMITTED (its name, its time) before the
// folded events and FINISHED (its latency from SUBMITTED), STARTED (the
// process's ids, the function) before RESULT_STORED (no name, ids or
// duration). One record for each part then, and fewer bytes. Not taken over:
// a start drained already, another attempt's, a FAILED (its own name).
TEST_CASE("a task's end takes over its start's record until a drain") {
  TaskEventRecorder recorder(16);
  NodeId node = NodeId::Random(), lease_node = NodeId::Random();
  WorkerId worker = WorkerId::Random();
  recorder.SetProcessIds(node, worker);
  auto record_task = [&](TaskEventRecorder& r, const TaskId& t, bool mark) {
    TaskEventMark submitted_mark, started_mark;
    const uint64_t submit_tick = r.Tick();
    const uint64_t submitted = r.Record(TaskEventKind::kSubmitted, t, 1, "f",
                                        {.actor_call = true, .at_tick = submit_tick,
                                         .start = mark ? &submitted_mark : nullptr});
    CHECK(submitted == submit_tick);
    r.Record(TaskEventKind::kStarted, t, 1, "fn",
             {.self_ids = true, .actor_call = true, .start = mark ? &started_mark : nullptr});
    const uint64_t fetched = r.Tick();
    const uint64_t executed = r.Tick();
    r.Record(TaskEventKind::kResultStored, t, 1, {},
             {.earlier_ticks = {fetched, executed}, .start = mark ? &started_mark : nullptr});
    const uint64_t ready = r.Tick();
    r.Record(TaskEventKind::kFinished, t, 1, {},
             {.node = lease_node, .worker_pid = 42, .actor_call = true, .since_tick = submitted,
              .earlier_ticks = {ready, r.Tick()}, .start = mark ? &submitted_mark : nullptr});
  };
  TaskId t = TaskId::Random();
  record_task(recorder, t, /*mark=*/true);
  std::string merged;
  REQUIRE(recorder.DrainPacked(&merged) == 2);  // records: one per part
  TaskEventRecorder apart_recorder(16);
  apart_recorder.SetProcessIds(node, worker);
  record_task(apart_recorder, t, /*mark=*/false);
  std::string apart;
  REQUIRE(apart_recorder.DrainPacked(&apart) == 4);
  CHECK(merged.size() + 2 * packed_events::kIdSize <= apart.size());

  auto a = packed_events::Decode(merged);
  auto b = packed_events::Decode(apart);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  REQUIRE(a->size() == 8);
  REQUIRE(b->size() == 8);
  auto sorted = [](std::vector<TaskEvent> v) {
    std::stable_sort(v.begin(), v.end(),
                     [](const TaskEvent& x, const TaskEvent& y) { return x.kind < y.kind; });
    return v;
  };
  std::vector<TaskEvent> x = sorted(*a), y = sorted(*b);
  for (size_t i = 0; i < x.size(); ++i) {
    INFO("event " << i << " " << TaskEventKindName(x[i].kind));
    CHECK(x[i].kind == static_cast<TaskEventKind>(i));
    CHECK(x[i].kind == y[i].kind);
    CHECK(x[i].task_id == t);
    CHECK(x[i].attempt == 1);
    CHECK(x[i].actor_call);
    CHECK(x[i].name == y[i].name);
    CHECK(x[i].node == y[i].node);
    CHECK(x[i].worker == y[i].worker);
    CHECK(x[i].worker_pid == y[i].worker_pid);
    CHECK(x[i].time_us > 0);
    if (x[i].kind == TaskEventKind::kFinished) {
      CHECK(x[i].duration_us >= 1);
      CHECK(x[i].time_us - x[i].duration_us == x[0].time_us);  // from SUBMITTED's time
    } else {
      CHECK(x[i].duration_us == 0);
    }
  }
  CHECK(x[0].name == "f");
  CHECK(x[3].name == "fn");
  CHECK(x[3].node == node);
  CHECK(x[3].worker == worker);
  CHECK(x[2].node == lease_node);
  CHECK(x[2].worker_pid == 42);
  CHECK(x[6].node.IsNil());
  CHECK(x[6].name.empty());
  CHECK(x[7].name.empty());
  CHECK(x[0].time_us <= x[7].time_us);
  // The node's lean walk counts the starts too.
  std::vector<TaskEventKind> tallied;
  REQUIRE(packed_events::ForEachTally(merged, [&](TaskEventKind kind, int64_t, uint64_t) {
            tallied.push_back(kind);
          }).ok());
  CHECK(tallied.size() == 8);
  CHECK(std::count(tallied.begin(), tallied.end(), TaskEventKind::kSubmitted) == 1);
  CHECK(std::count(tallied.begin(), tallied.end(), TaskEventKind::kStarted) == 1);

  // A start drained already stays a record of its own; so does the end.
  TaskEventMark mark;
  TaskId u = TaskId::Random();
  const uint64_t at = recorder.Record(TaskEventKind::kSubmitted, u, 0, "g", {.start = &mark});
  std::string first;
  REQUIRE(recorder.DrainPacked(&first) == 1);
  recorder.Record(TaskEventKind::kFinished, u, 0, {}, {.since_tick = at, .start = &mark});
  // Another attempt's end, and a FAILED, do not take over a start either.
  TaskEventMark other;
  TaskId v = TaskId::Random();
  const uint64_t at_v = recorder.Record(TaskEventKind::kSubmitted, v, 0, "h", {.start = &other});
  TaskEventMark copy = other;
  recorder.Record(TaskEventKind::kFinished, v, 1, {}, {.since_tick = at_v, .start = &copy});
  recorder.Record(TaskEventKind::kFailed, v, 0, "boom", {.since_tick = at_v, .start = &other});
  std::string second;
  REQUIRE(recorder.DrainPacked(&second) == 4);
  auto rest = packed_events::Decode(second);
  REQUIRE(rest.ok());
  REQUIRE(rest->size() == 4);
  CHECK((*rest)[0].kind == TaskEventKind::kFinished);
  CHECK((*rest)[0].task_id == u);
  CHECK((*rest)[0].duration_us >= 1);
  CHECK((*rest)[1].kind == TaskEventKind::kSubmitted);
  CHECK((*rest)[1].name == "h");
  CHECK((*rest)[2].kind == TaskEventKind::kFinished);
  CHECK((*rest)[2].attempt == 1);
  CHECK((*rest)[3].kind == TaskEventKind::kFailed);
  CHECK((*rest)[3].name == "boom");
}

// Invariant: what every record of a flush shares is written once: the
// process's node and worker (STARTED with self_ids reads them back, other
// records do not get them), and a name repeated within a flush (its records
// stay shorter than the first one that spelled it out, and read back whole).
TEST_CASE("packed task events write the process's ids and repeated names once per flush") {
  TaskEventRecorder recorder(64);
  NodeId node = NodeId::Random();
  WorkerId worker = WorkerId::Random();
  recorder.SetProcessIds(node, worker);
  const std::string name = "a_function_name_of_some_length";
  std::vector<TaskId> tasks;
  for (int i = 0; i < 4; ++i) {
    tasks.push_back(TaskId::Random());
    recorder.Record(TaskEventKind::kStarted, tasks.back(), 0, name, {.self_ids = true});
    recorder.Record(TaskEventKind::kResultStored, tasks.back(), 0);
  }
  recorder.Record(TaskEventKind::kSubmitted, TaskId::Random(), 0, "other");
  std::string one, all;
  {
    TaskEventRecorder single(4);
    single.SetProcessIds(node, worker);
    single.Record(TaskEventKind::kStarted, tasks[0], 0, name, {.self_ids = true});
    single.DrainPacked(&one);
  }
  REQUIRE(recorder.DrainPacked(&all) == 9);
  auto back = packed_events::Decode(all);
  REQUIRE(back.ok());
  REQUIRE(back->size() == 9);
  for (int i = 0; i < 4; ++i) {
    INFO("task " << i);
    const TaskEvent& started = (*back)[static_cast<size_t>(2 * i)];
    CHECK(started.kind == TaskEventKind::kStarted);
    CHECK(started.task_id == tasks[static_cast<size_t>(i)]);
    CHECK(started.name == name);
    CHECK(started.node == node);
    CHECK(started.worker == worker);
    CHECK(started.pid == static_cast<int32_t>(::getpid()));
    const TaskEvent& stored = (*back)[static_cast<size_t>(2 * i + 1)];
    CHECK(stored.node.IsNil());
    CHECK(stored.worker.IsNil());
    CHECK(stored.name.empty());
  }
  CHECK((*back)[8].name == "other");
  CHECK((*back)[8].node.IsNil());
  // The ids and the name cost the first STARTED alone; the next three
  // STARTED (with their RESULT_STORED) each take less than it.
  const size_t first = one.size() - packed_events::kSegmentHeaderSize - 2 * packed_events::kIdSize;
  CHECK(first > name.size() + packed_events::kIdSize);
  CHECK(all.size() < one.size() + 3 * first + 4 * (packed_events::kIdSize + 4) + 16);
}

// Invariant: a flush's frame that refers to the packed blob instead of
// copying it (ReferencePackedBlob) carries exactly its records, whatever their
// length (the blob's last word is padded, not its size), and reads back as
// the events recorded.
TEST_CASE("a frame referring to the packed blob carries exactly its records") {
  for (int events : {0, 1, 3, 50}) {
    INFO(events << " events");
    TaskEventRecorder recorder(64);
    TaskId t = TaskId::Random();
    for (int i = 0; i < events; ++i) {
      recorder.Record(TaskEventKind::kStarted, t, static_cast<uint32_t>(i), std::string(static_cast<size_t>(i % 7), 'n'));
    }
    std::string blob(1, static_cast<char>(packed_events::kVersion));
    recorder.DrainPacked(&blob);
    const std::string expected = blob;
    std::string frame;
    {
      OutMessage out;
      ReferencePackedBlob(&blob, out.Init().initTaskEvents());
      AppendFrame(out.builder(), &frame);
    }
    CHECK(blob == expected);
    REQUIRE(frame.size() % sizeof(capnp::word) == 0);
    std::vector<capnp::word> words((frame.size() - kFrameHeaderBytes) / sizeof(capnp::word));
    std::memcpy(words.data(), frame.data() + kFrameHeaderBytes, words.size() * sizeof(capnp::word));
    capnp::FlatArrayMessageReader reader(kj::arrayPtr(words.data(), words.size()));
    auto batch = reader.getRoot<proto::Envelope>().getTaskEvents();
    auto packed = batch.getPacked();
    CHECK(std::string(reinterpret_cast<const char*>(packed.begin()), packed.size()) == expected);
    auto back = TaskEventsFromProto(batch);
    REQUIRE(back.ok());
    REQUIRE(back->size() == static_cast<size_t>(events));
    for (int i = 0; i < events; ++i) {
      CHECK((*back)[static_cast<size_t>(i)].attempt == static_cast<uint32_t>(i));
      CHECK((*back)[static_cast<size_t>(i)].name == std::string(static_cast<size_t>(i % 7), 'n'));
    }
  }
}

// Invariant: a reader refuses what it cannot read instead of guessing: a
// record cut short, an unknown kind, a blob of another packed version (with
// an error naming both versions).
// Invariant: a FINISHED or FAILED given the executor's events (its reply's
// TaskExecution) reads back as them too, after the owner's folded events and
// before its own: STARTED at started_us in the worker's process (worker_pid)
// on the lease's node, named as the task when the record took over its
// SUBMITTED, then ARGS_FETCHED, EXECUTED and RESULT_STORED at the phases' ends;
// one record still, whether or not it took over its start. A FAILED's message
// is not the function's name. The lean walk counts the same kinds.
TEST_CASE("a finished task's record carries its executor's events") {
  TaskEventRecorder recorder(16);
  const TaskId whole = TaskId::Random(), apart = TaskId::Random(), failed = TaskId::Random();
  const NodeId node = NodeId::Random();
  const int64_t started = TaskEventRecorder::NowMicros() - 5000;
  const TaskExecution execution{
      .started_us = started, .args_fetch_us = 10, .run_us = 2000, .store_us = 30};
  auto end_of = [&](TaskEventMark* mark, uint64_t since) {
    return TaskEventDetail{.node = node,
                           .worker_pid = 4242,
                           .since_tick = since,
                           .earlier_ticks = {recorder.Tick(), recorder.Tick()},
                           .execution = execution,
                           .start = mark};
  };
  TaskEventMark mark;
  uint64_t since = recorder.Record(TaskEventKind::kSubmitted, whole, 0, "Fit", {.start = &mark});
  recorder.Record(TaskEventKind::kFinished, whole, 0, {}, end_of(&mark, since));
  since = recorder.Record(TaskEventKind::kSubmitted, apart, 0, "Fit");
  recorder.Record(TaskEventKind::kFinished, apart, 0, {}, end_of(nullptr, since));
  recorder.Record(TaskEventKind::kFailed, failed, 3, "it threw", end_of(nullptr, 0));
  std::string records;
  REQUIRE(recorder.DrainPacked(&records) == 4);  // whole: one record
  auto back = packed_events::Decode(records);
  REQUIRE(back.ok());
  std::map<TaskId, std::vector<TaskEvent>> by_task;
  for (const TaskEvent& e : *back) by_task[e.task_id].push_back(e);
  const std::vector<TaskEventKind> executor = {TaskEventKind::kStarted, TaskEventKind::kArgsFetched,
                                               TaskEventKind::kExecuted,
                                               TaskEventKind::kResultStored};
  for (const TaskId& t : {whole, apart, failed}) {
    INFO("task " << (t == whole ? "whole" : t == apart ? "apart" : "failed"));
    const std::vector<TaskEvent>& events = by_task[t];
    REQUIRE(events.size() == (t == failed ? 7 : 8));
    const size_t first = t == failed ? 2 : 3;  // after SUBMITTED and the folded two
    for (size_t k = 0; k < executor.size(); ++k) {
      const TaskEvent& e = events[first + k];
      CHECK(e.kind == executor[k]);
      CHECK(e.pid == 4242);
      CHECK(e.task_id == t);
      CHECK(e.attempt == (t == failed ? 3u : 0u));
    }
    const TaskEvent& start = events[first];
    CHECK(start.time_us == started);
    CHECK(start.node == node);
    CHECK(start.name == (t == whole ? "Fit" : ""));
    CHECK(events[first + 1].time_us == started + 10);
    CHECK(events[first + 2].time_us == started + 2010);
    CHECK(events[first + 3].time_us == started + 2040);
    CHECK(events[first + 3].node.IsNil());
    const TaskEvent& end = events.back();
    CHECK(end.kind == (t == failed ? TaskEventKind::kFailed : TaskEventKind::kFinished));
    CHECK(end.pid == static_cast<int32_t>(::getpid()));  // the owner's
    CHECK(end.name == (t == failed ? "it threw" : ""));
    CHECK(events[first - 1].kind == TaskEventKind::kLeaseGranted);
    CHECK(events[first - 1].node == node);
    CHECK(events[first - 1].worker_pid == 4242);
  }
  packed_events::EventCounts counts{};
  REQUIRE(
      packed_events::CountEvents(records, &counts, [](TaskEventKind, int64_t, uint64_t) {}).ok());
  for (TaskEventKind k : executor) CHECK(counts[static_cast<size_t>(k)] == 3);
  CHECK(counts[static_cast<size_t>(TaskEventKind::kSubmitted)] == 2);
  CHECK(counts[static_cast<size_t>(TaskEventKind::kFinished)] == 2);

  // The flag only on FINISHED and FAILED: on another kind the record is refused.
  std::string bad;
  packed_events::Append(
      TaskEvent{.kind = TaskEventKind::kSubmitted, .time_us = 5, .task_id = whole}, &bad);
  bad[packed_events::kSegmentHeaderSize] =
      static_cast<char>(bad[packed_events::kSegmentHeaderSize] | packed_events::kWithExecution);
  CHECK_FALSE(packed_events::Decode(bad).ok());
}

TEST_CASE("packed task events refuse cut records and unknown versions") {
  std::string records;
  TaskId t = TaskId::Random();
  packed_events::Append(TaskEvent{.kind = TaskEventKind::kStarted, .time_us = 5, .task_id = t, .name = "fn"},
                        &records);
  size_t count = 0;
  CHECK(packed_events::ForEach(records, [](const packed_events::View&) {}, &count).ok());
  CHECK(count == 1);
  for (size_t cut = 1; cut < records.size(); ++cut) {
    INFO("cut to " << cut);
    CHECK_FALSE(packed_events::Decode(std::string_view(records).substr(0, cut)).ok());
  }
  std::string bad_kind = records;
  bad_kind[packed_events::kSegmentHeaderSize] = static_cast<char>(kNumTaskEventKinds);
  CHECK_FALSE(packed_events::Decode(bad_kind).ok());
  // A record with no segment before it.
  CHECK_FALSE(packed_events::Decode(std::string_view(records).substr(packed_events::kSegmentHeaderSize)).ok());

  OutMessage out;
  auto batch = out.Init().initTaskEvents();
  SetPackedEvents(records, batch);
  auto ok = TaskEventsFromProto(batch.asReader());
  REQUIRE(ok.ok());
  REQUIRE(ok->size() == 1);
  CHECK((*ok)[0].name == "fn");
  batch.getPacked()[0] = packed_events::kVersion + 1;
  auto refused = TaskEventsFromProto(batch.asReader());
  REQUIRE_FALSE(refused.ok());
  CHECK_THAT(std::string(refused.status().message()), Catch::Contains("version 6"));
  CHECK_THAT(std::string(refused.status().message()), Catch::Contains("reads version 5"));
  // The records of an older Lumen (version 1: one per event; 2: a fixed
  // header per record; 3: no kWithStart; 4: no kWithExecution) are refused
  // too, not read as if they were this version's.
  for (uint8_t version : {1, 2, 3, 4}) {
    batch.getPacked()[0] = version;
    auto old = TaskEventsFromProto(batch.asReader());
    REQUIRE_FALSE(old.ok());
    CHECK_THAT(std::string(old.status().message()),
               Catch::Contains("version " + std::to_string(version) + " arrived"));
  }
}

// Invariant: the node's lean walks (ForEachTally, CountEvents) see what ForEach sees:
// the same kinds in the same order, folded events included, with the same
// durations and bytes, the same record count; and it refuses a blob at the
// same place ForEach does (every cut of a flush, a name index past the
// segment's names).
TEST_CASE("the lean task event walk agrees with ForEach, refusals included") {
  TaskEventRecorder recorder(64);
  recorder.SetProcessIds(NodeId::Random(), WorkerId::Random());
  TaskId t = TaskId::Random();
  const uint64_t submitted = recorder.Record(TaskEventKind::kSubmitted, t, 0, "f");
  recorder.Record(TaskEventKind::kStarted, t, 0, "f", {.self_ids = true});
  recorder.Record(TaskEventKind::kResultStored, t, 0, {}, {.earlier_ticks = {recorder.Tick(), 0}});
  recorder.Record(TaskEventKind::kFailed, t, 0, std::string(300, 'e'),
                  {.node = NodeId::Random(), .worker_pid = 7, .since_tick = submitted,
                   .earlier_ticks = {recorder.Tick(), recorder.Tick()}});
  recorder.RecordEvent(TaskEvent{.kind = TaskEventKind::kPull, .time_us = 1000, .name = "obj",
                                 .node = NodeId::Random(), .bytes = 12345, .duration_us = 67});
  recorder.Record(TaskEventKind::kFinished, TaskId::Random(), 1, {},
                  {.node = NodeId::Random(),
                   .worker_pid = 9,
                   .since_tick = submitted,
                   .earlier_ticks = {recorder.Tick(), recorder.Tick()},
                   .execution = {.started_us = TaskEventRecorder::NowMicros() - 500,
                                 .args_fetch_us = 3,
                                 .run_us = 200,
                                 .store_us = 1000}});
  recorder.Record(TaskEventKind::kSubmitted, TaskId::Random(), 2, "f");  // a name referred to
  std::string records;
  REQUIRE(recorder.DrainPacked(&records) == 7);
  records += records;  // two flushes end to end

  struct Seen {
    TaskEventKind kind;
    int64_t duration_us;
    uint64_t bytes;
    bool operator==(const Seen&) const = default;
  };
  auto walk_full = [](std::string_view r, std::vector<Seen>* seen, size_t* count) {
    return packed_events::ForEach(
        r, [&](const packed_events::View& v) { seen->push_back({v.kind, v.duration_us, v.bytes}); },
        nullptr, count);
  };
  auto walk_lean = [](std::string_view r, std::vector<Seen>* seen, size_t* count) {
    return packed_events::ForEachTally(
        r, [&](TaskEventKind kind, int64_t d, uint64_t b) { seen->push_back({kind, d, b}); }, count);
  };
  std::vector<Seen> full, lean;
  size_t full_count = 0, lean_count = 0;
  REQUIRE(walk_full(records, &full, &full_count).ok());
  REQUIRE(walk_lean(records, &lean, &lean_count).ok());
  CHECK(full.size() == 32);  // 14 records, 8 folded events, 8 executor events
  CHECK(lean_count == 14);
  CHECK(lean_count == full_count);
  CHECK(lean == full);
  bool pull_bytes = false, failed_latency = false;
  for (const Seen& s : lean) {
    pull_bytes |= s.kind == TaskEventKind::kPull && s.bytes == 12345 && s.duration_us == 67;
    failed_latency |= s.kind == TaskEventKind::kFailed && s.duration_us >= 1;
  }
  CHECK(pull_bytes);
  CHECK(failed_latency);

  // The node's count (CountEvents): ForEach's events by kind, and a call
  // for exactly those with a duration or bytes, in order.
  auto count_agrees = [](std::string_view r, const std::vector<Seen>& full_seen,
                         const absl::Status& full_status, size_t full_records) {
    packed_events::EventCounts counts{}, expected{};
    std::vector<Seen> measured, expected_measured;
    for (const Seen& s : full_seen) {
      ++expected[static_cast<size_t>(s.kind)];
      if (s.duration_us != 0 || s.bytes != 0) expected_measured.push_back(s);
    }
    size_t records_counted = 0;
    absl::Status c = packed_events::CountEvents(
        r, &counts,
        [&](TaskEventKind kind, int64_t d, uint64_t b) { measured.push_back({kind, d, b}); },
        &records_counted);
    CHECK(c.ok() == full_status.ok());
    CHECK(c.message() == full_status.message());
    CHECK(counts == expected);
    CHECK(measured == expected_measured);
    CHECK(records_counted == full_records);
  };
  count_agrees(records, full, absl::OkStatus(), full_count);
  CHECK(std::count_if(full.begin(), full.end(),
                      [](const Seen& s) { return s.duration_us != 0 || s.bytes != 0; }) >= 6);

  for (size_t cut = 1; cut < records.size(); ++cut) {
    INFO("cut to " << cut);
    std::vector<Seen> f, l;
    absl::Status a = walk_full(std::string_view(records).substr(0, cut), &f, &full_count);
    absl::Status b = walk_lean(std::string_view(records).substr(0, cut), &l, &lean_count);
    REQUIRE(a.ok() == b.ok());
    CHECK(a.message() == b.message());
    CHECK(l == f);
    count_agrees(std::string_view(records).substr(0, cut), f, a, full_count);
  }
  // The last record refers to the name "f" by index; past the names: refused.
  std::string bad = records.substr(0, records.size() / 2);
  REQUIRE((static_cast<uint8_t>(bad.back()) & 0x80) == 0);
  bad.back() = 5;
  std::vector<Seen> f, l;
  absl::Status a = walk_full(bad, &f, &full_count);
  absl::Status b = walk_lean(bad, &l, &lean_count);
  REQUIRE_FALSE(b.ok());
  CHECK(a.message() == b.message());
}

}  // namespace
}  // namespace lumen
