// One joined collective group in this process: its Gloo context (or NCCL
// communicator), the order its operations run in, its tags, and whether an
// earlier failure broke it.
//
// Threads: operations run one at a time in call order: synchronous ones on the
// caller's thread (RunSync), asynchronous ones on the group's executor thread
// (RunAsync; started on first use, joined by the destructor). Every member is
// thread-safe; the state shared by those threads is guarded by mu_.
// Ownership: the registry in collective.cc and each running operation share it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gloo/context.h>
#include <gloo/transport/device.h>

#include "call_record.h"
#include "kv_rendezvous_store.h"
#include "lumen/train/collective.h"
#ifdef LUMEN_WITH_NCCL
#include "nccl_backend.h"
#endif

namespace lumen::collective::internal {

// One asynchronous operation's completion, shared by the caller's future and
// the group's executor thread. Thread-safe.
class Pending {
 public:
  void Finish(std::exception_ptr error);
  // Blocks until Finish; rethrows its error.
  void Wait();
  bool Ready();

 private:
  // Operation caches (Cached/Cache), most recent first; only the running
  // operation touches them.
  std::deque<std::pair<CallShape, std::shared_ptr<void>>> cache_;

  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;            // guarded by mu_
  std::exception_ptr error_;     // guarded by mu_
};

class Group {
 public:
  Group(GroupOptions options, std::string prefix);
  // Runs the operations still queued (they fail fast once the group is
  // broken), then stops the executor.
  ~Group();

  // Rendezvous: publishes this member, connects the full mesh (or the NCCL
  // communicator). Throws CollectiveError.
  void Connect();

  // Runs `op` (given the op's tag) on the caller's thread once every earlier
  // operation finished. A CollectiveError from `op` is a usage error and
  // leaves the group usable; any other exception breaks the group and comes
  // out as a CollectiveError naming the failed rank when it can tell.
  void RunSync(const char* what, const std::function<void(uint32_t)>& op);
  // Queues `op` for the executor thread; the result completes when it ran.
  std::shared_ptr<Pending> RunAsync(const char* what, std::function<void(uint32_t)> op);

  // The shape check (GroupOptions::verify_sizes) and inline data exchange of
  // one call (call_record.h), under tag `tag - 1`: returns every rank's record
  // in rank order. Throws CollectiveError on every rank when the shapes differ
  // (the group stays usable). `payload` (payload_bytes <= kInlineBytes, or
  // null) travels inline.
  std::vector<CallRecord> Agree(uint32_t tag, const char* what, const CallShape& shape,
                                const void* payload, size_t payload_bytes);

  // "collective group 'g' (rank 0 of 3): all_reduce failed: ".
  std::string Describe(const char* what) const;

  const GroupOptions& options() const { return options_; }
  KvRendezvousStore& store() { return store_; }
  const std::shared_ptr<gloo::Context>& context() const { return context_; }
#ifdef LUMEN_WITH_NCCL
  // The NCCL communicator of a kNccl group, else nullptr.
  NcclComm* nccl() const { return nccl_.get(); }
#endif
  int rank() const { return options_.rank; }
  int size() const { return options_.world_size; }
  std::chrono::milliseconds timeout() const { return options_.timeout; }

  // What an operation keeps between its calls of one shape (Gloo's
  // reduce-scatter algorithm with its buffers): the entries of the two most
  // recently used shapes; null when `shape` has none. Every rank makes the
  // same calls, so every rank builds and drops entries at the same calls.
  // Touched only by the running operation (the group runs one at a time).
  std::shared_ptr<void> Cached(const CallShape& shape);
  void Cache(const CallShape& shape, std::shared_ptr<void> entry);

  // Point-to-point sequence numbers: the n-th send from a to b meets the n-th
  // receive at b from a.
  uint64_t NextSendSeq(int dst);
  uint64_t NextRecvSeq(int src);

 private:
  struct Queued {
    const char* what;
    uint32_t tag;
    std::function<void(uint32_t)> op;
    std::shared_ptr<Pending> pending;
  };

  void CheckUsable(const char* what);  // needs mu_
  std::exception_ptr Execute(const char* what, uint32_t tag,
                             const std::function<void(uint32_t)>& op);
  // Names the rank that failed after Gloo reported `gloo_error`.
  std::string Diagnose(const std::string& gloo_error);
  void ExecutorLoop();

  const GroupOptions options_;
  KvRendezvousStore store_;
  // Set by Connect before the group is shared; read-only afterwards.
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::Context> context_;
#ifdef LUMEN_WITH_NCCL
  NcclCommPtr nccl_;
#endif

  // Operation caches (Cached/Cache), most recent first; only the running
  // operation touches them.
  std::deque<std::pair<CallShape, std::shared_ptr<void>>> cache_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Queued> queue_;             // guarded by mu_
  bool running_ = false;                 // guarded by mu_
  bool stopping_ = false;                // guarded by mu_
  uint32_t tag_ = 0;                     // guarded by mu_; two per operation
  std::string broken_;                   // guarded by mu_; why, once an operation failed
  std::map<int, uint64_t> send_seq_;     // guarded by mu_
  std::map<int, uint64_t> recv_seq_;     // guarded by mu_
  std::thread executor_;                 // started under mu_
};

}  // namespace lumen::collective::internal
