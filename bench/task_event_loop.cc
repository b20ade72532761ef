// The task events' own work per task, alone: one thread records what the
// owner and the executor of each task record in a cluster (SUBMITTED taken
// over by FINISHED with two folded ticks, STARTED taken over by RESULT_STORED
// with two), for `tasks` tasks in windows of 1,000 in flight, drains the
// recorder every `drain` tasks (2,000; DrainPacked, as the flusher; at window
// ends, so a multiple of 1,000) and walks each blob
// as the node daemon does (packed_events::CountEvents). Prints the thread's
// CPU time per task (nanoseconds, best of `rounds`) and the packed bytes per
// task. Steadier than a cluster's CPU on a loaded machine (doc/observability.md,
// "Cost").
//
//   build/bench/task_event_loop [tasks] [rounds] [KiB] [drain] [long]
//                                 # default 60000 15 0 2000; `long`: the names are an
//                                 # actor method's, 33 bytes (past a slot's 32)
//
// A tree before CountEvents (main before stop 32) builds it with
// -DTASK_EVENT_LOOP_FOR_EACH_TALLY (the same walk through ForEachTally).
//
// With KiB (> 0), each task also writes that much of a large buffer (Thrash),
// and the rounds alternate events on and off: on - off is then the events'
// cost with their lines evicted between uses, as in a busy process.
#include <time.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "lumen/common/ids.h"
#include "lumen/common/task_event_packed.h"
#include "lumen/common/task_events.h"

namespace {

using lumen::TaskEventDetail;
using lumen::TaskEventKind;
using lumen::TaskEventMark;

double ThreadSeconds() {
  struct timespec ts;
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

struct Task {
  lumen::TaskId id;
  uint64_t submitted_tick = 0, ready_tick = 0, lease_tick = 0;
  TaskEventMark submitted_mark, started_mark;
};

}  // namespace

// Per task, `kb` KiB of a 64 MiB buffer written (one byte a cache line, on
// from where the last task stopped): the rest of a runtime's work, which
// evicts the rings' lines between a record, its end's takeover and the
// drain, as a driver's io thread does at ~100,000 tasks/s. The loop then
// runs with events on and off, and the difference is the events' cost.
void Thrash(size_t kb) {
  static std::vector<char> buffer(64 << 20);
  static size_t at = 0;
  for (size_t i = 0; i < kb * 1024; i += 64) {
    buffer[at] = static_cast<char>(buffer[at] + 1);
    at = at + 64 < buffer.size() ? at + 64 : 0;
  }
}

int main(int argc, char** argv) {
  const size_t tasks = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 60000;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 15;
  const size_t thrash_kb = argc > 3 ? std::strtoull(argv[3], nullptr, 10) : 0;
  constexpr size_t kWindow = 1000;
  const size_t drain_every = argc > 4 ? std::strtoull(argv[4], nullptr, 10) : 2000;
  lumen::TaskEventRecorder recorder;
  recorder.SetProcessIds(lumen::NodeId::Random(), lumen::WorkerId::Random());
  const lumen::NodeId lease_node = lumen::NodeId::Random();
  // `long`: named as the microbenchmark's actor calls are, one byte more than
  // a slot holds (TaskEventRecorder::kInlineName).
  const bool long_names = argc > 5 && std::string(argv[5]) == "long";
  const std::string name = long_names ? "&lumen::bench::Server::SmallValue" : "small_value";
  const std::string function = long_names ? name : "bench::SmallValue";
  std::vector<Task> window(kWindow);
  std::vector<lumen::TaskId> ids(tasks + kWindow);  // made outside the timing
  for (auto& id : ids) id = lumen::TaskId::Random();
  std::string blob;
  double best = 1e9, best_off = 1e9;
  size_t bytes = 0, records = 0;
  uint64_t tallied = 0;
  // With thrash: even rounds events on, odd ones off.
  for (int round = 0; round < (thrash_kb > 0 ? 2 * rounds : rounds); ++round) {
    const bool on = thrash_kb == 0 || round % 2 == 0;
    recorder.SetEnabled(on);
    if (on) bytes = records = 0;
    const double start = ThreadSeconds();
    size_t since_drain = 0;
    for (size_t done = 0; done < tasks; done += kWindow) {
      for (size_t i = 0; i < kWindow; ++i) {
        Task& t = window[i];
        t.id = ids[done + i];
        t.submitted_tick = recorder.Tick();
        recorder.Record(TaskEventKind::kSubmitted, t.id, 0, name,
                        {.at_tick = t.submitted_tick, .start = &t.submitted_mark});
        t.ready_tick = recorder.Tick();
        t.lease_tick = recorder.Tick();
      }
      for (Task& t : window) {
        if (thrash_kb > 0) Thrash(thrash_kb);
        recorder.Record(TaskEventKind::kStarted, t.id, 0, function,
                        {.self_ids = true, .start = &t.started_mark});
        const uint64_t fetched = recorder.Tick(), executed = recorder.Tick();
        recorder.Record(TaskEventKind::kResultStored, t.id, 0, {},
                        {.earlier_ticks = {fetched, executed}, .start = &t.started_mark});
        recorder.Record(TaskEventKind::kFinished, t.id, 0, {},
                        {.node = lease_node, .worker_pid = 4242, .since_tick = t.submitted_tick,
                         .earlier_ticks = {t.ready_tick, t.lease_tick}, .start = &t.submitted_mark});
      }
      since_drain += kWindow;
      if (since_drain >= drain_every || done + kWindow >= tasks) {
        since_drain = 0;
        blob.clear();
        recorder.DrainPacked(&blob);
        size_t n = 0;
#ifdef TASK_EVENT_LOOP_FOR_EACH_TALLY  // a tree before CountEvents (stop 32)
        absl::Status walked = lumen::packed_events::ForEachTally(
            blob, [&](TaskEventKind kind, int64_t, uint64_t) { tallied += static_cast<uint64_t>(kind); }, &n);
#else
        lumen::packed_events::EventCounts counts{};
        absl::Status walked = lumen::packed_events::CountEvents(
            blob, &counts, [&](TaskEventKind kind, int64_t, uint64_t) { tallied += static_cast<uint64_t>(kind); }, &n);
#endif
        if (!walked.ok()) {
          std::fprintf(stderr, "walk: %s\n", std::string(walked.message()).c_str());
          return 1;
        }
        bytes += blob.size();
        records += n;
      }
    }
    (on ? best : best_off) = std::min(on ? best : best_off, ThreadSeconds() - start);
  }
  if (thrash_kb > 0) {
    std::printf("with %zu KiB written per task: on %.1f, off %.1f, on - off %.1f ns per task\n",
                thrash_kb, best * 1e9 / static_cast<double>(tasks),
                best_off * 1e9 / static_cast<double>(tasks), (best - best_off) * 1e9 / static_cast<double>(tasks));
  }
  std::printf("%.1f ns per task (best of %d rounds of %zu tasks), %.1f bytes and %.2f records per task%s\n",
              best * 1e9 / static_cast<double>(tasks), rounds, tasks,
              static_cast<double>(bytes) / static_cast<double>(tasks),
              static_cast<double>(records) / static_cast<double>(tasks), tallied == 0 ? " (?)" : "");
  return 0;
}
