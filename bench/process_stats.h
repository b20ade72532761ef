// What a process costs, read from /proc: peak and current resident memory,
// proportional set size (shared pages split between their users), CPU time,
// children. The scale benchmark (`lumen microbenchmark --scale`) measures the
// driver, the daemons and the workers with it.
//
//   ResetPeakRss(pid);                  // the next PeakRssKiB counts from here
//   ... work ...
//   long kib = PeakRssKiB(pid);
//
// Linux only; every reader returns 0 (or empty) when the process is gone or
// the file cannot be read. Thread-safe (no state).
#pragma once

#include <sys/types.h>

#include <vector>

namespace lumen::bench {

// VmHWM of `pid` (0: this process), in KiB.
long PeakRssKiB(pid_t pid = 0);
// VmRSS of `pid` (0: this process), in KiB.
long RssKiB(pid_t pid = 0);
// RssAnon of `pid` (0: this process), in KiB: its private memory (heap,
// stacks), without file and shared-memory pages.
long RssAnonKiB(pid_t pid = 0);
// Pss of `pid` from smaps_rollup, in KiB.
long PssKiB(pid_t pid);
// Resets VmHWM to the current RSS (writes 5 to clear_refs); false if refused.
bool ResetPeakRss(pid_t pid = 0);
// User plus system CPU time of `pid` (0: this process), in seconds.
double CpuSeconds(pid_t pid = 0);
// The direct children of `pid`, from each of its threads' `children` list.
std::vector<pid_t> ChildrenOf(pid_t pid);
// The threads of `pid` (0: this process).
long ThreadsOf(pid_t pid = 0);
// The machine's limit on process ids (each thread takes one).
long PidLimit();
// MemAvailable of the machine, in KiB.
long AvailableMemoryKiB();
// The soft limit on open files of this process.
long OpenFileLimit();

}  // namespace lumen::bench
