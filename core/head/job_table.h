// JobTable: the jobs that ended (their driver exited, or the node it was
// attached to died), so every node ends their workers and leases. Nodes learn
// of them through the cluster view, each only the ones it has not seen yet
// (ChangeLog): the table keeps the last `kEndedJobsKept`.
//
//   JobTable jobs;
//   if (jobs.End(job)) { /* new: tell the nodes */ }
//   jobs.ended().ForEachSince(seen, [&](const JobId& j) { ... });
//
// No I/O. Not thread-safe: owned by the head's event loop (checked in debug builds).
#pragma once

#include <cstddef>

#include "absl/container/flat_hash_set.h"
#include "core/head/change_log.h"
#include "lumen/common/ids.h"
#include "lumen/common/thread_checker.h"

namespace lumen::head {

class JobTable {
 public:
  static constexpr size_t kEndedJobsKept = 1000;

  JobTable() : ended_(kEndedJobsKept) {}

  // Records that `job` ended; false when it was already known to have ended.
  bool End(const JobId& job);
  // The ended jobs, numbered in the order they ended.
  const ChangeLog<JobId>& ended() const { return ended_; }

 private:
  ChangeLog<JobId> ended_;
  // The ids in ended_ (dedup); trimmed with it.
  absl::flat_hash_set<JobId> ended_set_;
  ThreadChecker thread_;
};

}  // namespace lumen::head
