// Names the runtime gives to failures that the user API throws as a subclass
// of the failure kind's exception, and the marker by which an owner knows a
// worker was killed by its node's memory monitor.
//
//   Failure{proto::FailureKind::OBJECT_LOST, kOwnerDiedErrorType, "...", ""}
//       // lumen::Get throws lumen::OwnerDiedError (an ObjectLostError)
//
// The wire keeps the kind (OBJECT_LOST, WORKER_CRASHED), so a peer that does
// not know the name still throws the base class. Constants only.
#pragma once

namespace lumen {

// TaskFailure::exception_type for OBJECT_LOST: the object's owner died.
inline constexpr char kOwnerDiedErrorType[] = "lumen::OwnerDiedError";
// TaskFailure::exception_type for WORKER_CRASHED: its node's memory monitor
// killed the worker, and the task had no retries left.
inline constexpr char kOutOfMemoryErrorType[] = "lumen::OutOfMemoryError";
// Starts the reason a node daemon gives for a memory-monitor kill; a worker's
// exit cause then reads "killed by SIGKILL from its node daemon (memory
// monitor: ...)".
inline constexpr char kMemoryMonitorKillTag[] = "memory monitor: ";

}  // namespace lumen
