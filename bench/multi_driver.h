// multi_driver_tasks_async: extra driver processes (this binary re-executed
// as `lumen microbenchmark --client SECONDS`) join the running cluster and
// submit task batches at once; the rate is all their tasks over the span in
// which any ran. Not a Ray microbenchmark metric (Ray's multi_client_tasks_async
// uses client actors, see task_metrics.h); it was Lumen's multi_client_tasks_async.
//
//   RunMultiDriverMetric(out, 2, 0.5);   // the parent, after lumen::Init
//   return RunDriverClient(0.5);         // in each client process
#pragma once

#include "bench/reporter.h"

namespace lumen::bench {

// The parent: starts `drivers` client processes joined to this process's
// cluster, each submitting for `seconds`, and prints the metric. Runs on the
// main thread; waits for the children.
void RunMultiDriverMetric(Reporter& out, int drivers, double seconds);

// A client process: joins the cluster at LUMEN_ADDRESS, submits batches of
// 1,000 tasks for `seconds` after a warm-up batch, and prints
// "tasks first_ns last_ns" (wall clock) for the parent. Returns the exit code.
int RunDriverClient(double seconds);

}  // namespace lumen::bench
