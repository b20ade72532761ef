// The store provider of one driver or worker process (Ray's
// CoreWorkerPlasmaStoreProvider, smaller): what it asks of its node's
// shared-memory store. It owns the mapping of the store's segment and the
// pins of the zero-copy views it hands out, and sends the store requests on
// our node daemon's connection: create, seal, abort, get (which pins), pull
// (a copy from another node), release, delete (on any node).
//
//   StoreProvider store(poster, connections, node_conn, segment, {.job_id = job});
//   absl::StatusOr<uint8_t*> out = store.CreateWritable(id, size);   // then write
//   absl::Status sealed = store.Seal(id, size);                        // or Abort
//   StoreResult got = store.Get(id);  // absl::StatusOr<StoreRegion>
//   internal::ObjectBytes bytes = store.PinnedBytes(id, got->offset, got->size);
//
// Lost replies (doc/reliability.md, item 9): create, seal, abort and get carry
// a RetryKey (SetRetryKey) and a pull is idempotent, so a request whose reply
// was lost is sent again at once on the same connection, same request id and
// key; the store answers a repeat from its table (objectstore/store_repeats.h)
// and acts once. Release and delete have no reply and are sent once (a lost
// connection releases every pin of ours at the store). On a live connection
// only the fault injector loses a reply (`storeGet:drop_reply:1`, ...:
// fail_in_flight is taken as drop_reply, fail_before_send sends again at once;
// at most kControlAttempts - 1 attempts of a request are broken).
//
// Threads: the blocking requests (Create/Seal/Abort/Get/Pull/CallNode) are
// made from any thread but the io thread, and wait for the daemon's reply;
// SendToNode, Release and DeleteCopies post and return. The connections are
// touched on the io thread only (checked in debug builds). A pin may be
// released after Stop, even after this is gone (PinReleaser). Internal to
// core/worker.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "lumen/common/connection.h"
#include "lumen/common/ids.h"
#include "lumen/common/thread_checker.h"
#include "lumen/internal/runtime.h"
#include "lumen/objectstore/shm_segment.h"
#include "lumen/objectstore/store_region.h"

namespace lumen::runtime {

class IoPoster;             // core/worker/io_poster.h
class OutboundConnections;  // core/worker/outbound_connections.h

// A store request's answer: where the object lies in the segment.
using objectstore::StoreRegion;
using StoreResult = absl::StatusOr<StoreRegion>;

class StoreProvider {
 public:
  struct Options {
    JobId job_id;  // named in our pulls
  };

  // `poster` and `connections` outlive this; `node_conn` is our node
  // daemon's connection, `segment` its store's mapping.
  StoreProvider(IoPoster& poster, OutboundConnections& connections,
                std::shared_ptr<Connection> node_conn,
                std::shared_ptr<objectstore::ShmSegment> segment, Options options);
  ~StoreProvider();
  StoreProvider(const StoreProvider&) = delete;
  StoreProvider& operator=(const StoreProvider&) = delete;

  // Creates `id` (`size` bytes) in our node's store and returns where to write
  // it (prefaulted). ResourceExhausted: the store is full.
  absl::StatusOr<uint8_t*> CreateWritable(const ObjectId& id, uint64_t size);
  [[nodiscard]] absl::Status Seal(const ObjectId& id, uint64_t size);
  // The half-written object goes; a failure (the object is gone already, or
  // the daemon is) is logged: the caller has nothing else to do about it.
  void Abort(const ObjectId& id, uint64_t size);
  // Pins `id` in our node's store. NotFound: not here; Unavailable: being
  // pulled here by another reader.
  [[nodiscard]] StoreResult Get(const ObjectId& id);
  // Has our daemon copy `id` here from `node` (at `node_address`), once
  // however many ask.
  [[nodiscard]] StoreResult Pull(const ObjectId& id, uint64_t size, const NodeId& node,
                                 const std::string& node_address);
  // One blocking request to our node daemon, answered with a storeReply. Sent
  // again after a lost reply when it carries a key or is a pull (above); any
  // other fails then with Unavailable.
  [[nodiscard]] StoreResult CallNode(absl::FunctionRef<void(proto::Envelope::Builder)> fill);

  // The bytes of a pinned object: the pin keeps the mapping alive and gives
  // the object back to the store when the last reader lets go, even if that
  // happens after Stop.
  internal::ObjectBytes PinnedBytes(const ObjectId& id, uint64_t offset, uint64_t size);
  // Unpins `id` (a Get's pin). Any thread; posted.
  void Release(const ObjectId& id);
  // Deletes the copies of an object on these nodes ("" is ours). Any thread; posted.
  void DeleteCopies(const ObjectId& id, std::vector<std::string> node_addresses);
  // Sends a frame to our node daemon (no reply). Any thread; posted.
  void SendToNode(std::function<void(proto::Envelope::Builder)> fill);

  // The node daemon is gone: requests fail at once from now on.
  void OnNodeLost() { closed_ = true; }
  // The runtime stops: requests fail at once, and pins released from now on
  // send nothing.
  void Stop();

 private:
  enum Op { kCreate, kSeal, kAbort, kGet };
  [[nodiscard]] StoreResult CallStore(Op op, const ObjectId& id, uint64_t size);
  // One blocking request and its attempts, on its caller's stack (.cc).
  struct Call;
  // Sends `call`'s next attempt (io thread).
  void SendAttempt(Call& call);
  // An answer to `call`'s attempt (or an empty envelope: the connection closed).
  void OnReply(Call& call, proto::Envelope::Reader msg);

  // Lets a pin released after Stop find no provider instead of a dangling one.
  struct PinReleaser {
    absl::Mutex mu;
    StoreProvider* provider ABSL_GUARDED_BY(mu) = nullptr;
  };

  IoPoster& poster_;
  OutboundConnections& connections_;
  const std::shared_ptr<Connection> node_conn_;
  // Shared with the pins of zero-copy views, which may outlive this.
  const std::shared_ptr<objectstore::ShmSegment> segment_;
  const Options options_;
  const std::shared_ptr<PinReleaser> releaser_;
  std::atomic<bool> closed_{false};
  ThreadChecker io_thread_;
};

}  // namespace lumen::runtime
