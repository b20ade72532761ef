// One call of an actor method as the caller-side submitter sees it, the
// failure a task or call ends with, and where an actor runs (the owner's answer
// to its callers).
//
// The runtime derives its own task record from ActorCall (adding arguments and
// the return object); the submitter only orders, sends and resends calls.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "lumen/common/ids.h"
#include "lumen/proto/lumen.capnp.h"

namespace lumen::actors {

// Why a value is not there: the payload of a failed object.
struct TaskFailure {
  proto::FailureKind kind = proto::FailureKind::OTHER;
  std::string exception_type;
  std::string message;
  std::string location;
  // lumen::Cancel ended the task: the API throws TaskCancelledError, and it
  // is never retried.
  bool cancelled = false;
};

// Where an actor runs, as its owner (or the head) answered.
struct ActorLocation {
  bool alive = false;
  std::string address;  // alive: its process
  std::string death;    // dead: why
  // The actor's retry budget for interrupted calls, when the answer carries it.
  std::optional<int> max_task_retries;
};

// Not thread-safe: owned by one submitter on its owner's thread.
struct ActorCall {
  virtual ~ActorCall() = default;

  TaskId task_id;
  std::string function;
  // Per actor and submitter, from 1, in submission order: the order in which
  // the actor receives the calls (a resent call keeps its number).
  uint64_t sequence = 0;
  uint32_t attempt = 0;  // 0 for the first send; +1 per resend after a restart
  bool resolved = false;  // its arguments are ready: it may go when its turn comes
  // An argument failed: it fails instead. Behind a pointer: rare, and a
  // TaskFailure inline would cost every queued call ~100 bytes.
  std::unique_ptr<TaskFailure> dep_failure;
};

}  // namespace lumen::actors
