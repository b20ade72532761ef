#include "core/head/job_table.h"

namespace lumen::head {

bool JobTable::End(const JobId& job) {
  thread_.Check("JobTable");
  if (!ended_set_.insert(job).second) return false;
  if (ended_.size() == ended_.capacity() && ended_.oldest() != nullptr) {
    ended_set_.erase(*ended_.oldest());  // the log forgets it now
  }
  ended_.Append(job);
  return true;
}

}  // namespace lumen::head
