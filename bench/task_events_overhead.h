// `lumen microbenchmark --task-events`: what recording task events costs. Runs
// single_client_tasks_async and 1_1_actor_calls_async on embedded clusters with
// task events on and off (LUMEN_TASK_EVENTS=0 for the daemons and workers, the
// driver's recorder switched off), in two rounds (LUMEN_TASK_EVENTS_ROUNDS when
// set; on first in even rounds, off first in odd ones), after one untimed
// warm-up cluster (the process's first cluster pays one-time costs that would
// fall on whichever setting ran first), so the measurements of each metric
// come from one run on one machine state.
//
//   RunTaskEventsOverhead(out, quick);
//
// Prints `<metric>_events_on` and `<metric>_events_off` lines, the CPU each
// call cost all processes of the cluster together (`<metric>_cpu_events_on`,
// microseconds: on a loaded machine steadier than the rate) with a note
// splitting it into driver, head + node daemon and workers, and, as a note
// per metric, the on/off ratios of both, averaged over the rounds. Main thread; starts and stops its own clusters (call it
// with none running).
#pragma once

#include "bench/reporter.h"

namespace lumen::bench {

void RunTaskEventsOverhead(Reporter& out, bool quick);

}  // namespace lumen::bench
