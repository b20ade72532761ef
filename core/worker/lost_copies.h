// Lost copies of one driver or worker process (doc/reliability.md, item 4): a
// reader (an executor fetching a task's argument, or a Get) that cannot read
// a stored object where its owner said it was tells the owner
// (recoverObject) and waits for the answer, as Ray's worker asks the owner
// and waits for a reconstruction; the owner forgets that copy and, when none
// is left, rebuilds the object from its lineage (ObjectRecovery) before it
// answers with the new location.
//
//   LostCopies lost(table, recovery, connections, poster, {.listen_address = ours},
//                   [&] { return stopping; });
//   absl::StatusOr<RecoveredCopy> now = lost.RecoverFromOwner(id, owner, node, why);  // reader
//   lost.OnCopyUnreadable(id, node, why);  // owner, io thread
//
// Threads: OnCopyUnreadable runs on the io thread only (checked in debug
// builds); RecoverFromOwner blocks its calling thread (never the io thread)
// and does its work there by posting. Internal to core/worker.
#pragma once

#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "core/worker/object_getter.h"
#include "lumen/common/ids.h"
#include "lumen/common/thread_checker.h"

namespace lumen::runtime {

class IoPoster;             // core/worker/io_poster.h
class ObjectRecovery;       // core/worker/object_recovery.h
class ObjectTable;          // core/worker/object_table.h
class OutboundConnections;  // core/worker/outbound_connections.h

class LostCopies {
 public:
  struct Options {
    std::string listen_address;  // our owner service: the owner of what we own
  };

  // The references outlive this. `stopping`: true once the runtime stops or
  // loses its node (any thread): a reader stops waiting.
  LostCopies(ObjectTable& table, ObjectRecovery& recovery, OutboundConnections& connections,
             IoPoster& poster, Options options, std::function<bool()> stopping);
  LostCopies(const LostCopies&) = delete;
  LostCopies& operator=(const LostCopies&) = delete;

  // Owner side, io thread: our object `id` could not be read at `node`
  // (`why`): that copy is forgotten; with none left, the object is rebuilt
  // (or fails: ObjectRecovery::OnLost).
  void OnCopyUnreadable(const ObjectId& id, const NodeId& node, const std::string& why);
  // Reader side, blocking (not on the io thread): tells `owner` (our own
  // listen address: this process) that `id` could not be read at `node` and
  // waits until it is ready again. Errors: the object failed (its failure's
  // message; DataLoss), the owner is unreachable or died (Unavailable), the
  // runtime stops (Cancelled).
  absl::StatusOr<RecoveredCopy> RecoverFromOwner(const ObjectId& id, const std::string& owner,
                                                 const NodeId& node, const std::string& why);

 private:
  ObjectTable& table_;
  ObjectRecovery& recovery_;
  OutboundConnections& connections_;
  IoPoster& poster_;
  const Options options_;
  const std::function<bool()> stopping_;
  ThreadChecker io_thread_;
};

}  // namespace lumen::runtime
