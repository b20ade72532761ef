// How absl::Mutex checks lock order in this process.
//
// Debian's Abseil is built without NDEBUG, so its Mutex runs its debug-mode
// deadlock detection by default: every Lock takes one process-wide spin lock
// and updates a graph of lock order (GraphCycles), and every Mutex destroyed
// (each absl::Notification, say) removes itself from that graph under the same
// spin lock. On the task path that is several global-lock round trips per
// task in every process, serialising threads that share no lock (issue 13).
//
//   lumen::ConfigureMutexDeadlockDetection();  // first thing in each process
//
// In a build with NDEBUG (Release, RelWithDebInfo) it turns the detection
// off, unless LUMEN_MUTEX_DEADLOCK_DETECTION=1; a debug build keeps it (and
// LUMEN_MUTEX_DEADLOCK_DETECTION=0 turns it off there). Thread-safe; call it
// before other threads start so that no lock is half-tracked.
#pragma once

namespace lumen {

void ConfigureMutexDeadlockDetection();

}  // namespace lumen
