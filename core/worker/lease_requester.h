// One lease requester shared by task and actor submission: asks the local node
// daemon for a worker lease of a shape, follows spillbacks to other nodes,
// retries when told to (or when the spillback target is gone), and warns once
// per shape that nothing in the cluster can run it yet.
//
//   LeaseRequester leases(transport, {.retry_delay = 20ms, .spillback_retry_delay = 50ms});
//   leases.Acquire(shape, [](proto::LeaseReply::Reader reply, std::shared_ptr<Connection> node) {
//     if (reply.getGranted()) ...   // `node`: the daemon that granted it
//   });
//
// Invariant: `done` runs at most once per Acquire (exactly once unless the
// runtime shuts down first): with a grant, or a refusal saying why.
//
// Only on the io thread (checked in debug builds); what it needs from the
// runtime (node connections, the clock) comes through LeaseTransport.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "lumen/common/connection.h"
#include "lumen/common/ids.h"
#include "lumen/common/thread_checker.h"
#include "lumen/internal/runtime.h"

namespace lumen::runtime {

// What a lease is asked for: a worker for one shape of work.
struct LeaseShape {
  std::map<std::string, double> resources;  // held while leased
  std::map<std::string, double> placement;  // needed to grant it (actors)
  bool actor = false;
  bool detached = false;
  internal::SchedulingOptions scheduling;
  std::string name;  // for warnings and listings
  // Its tasks may be retried (max_retries != 0): a node over its memory
  // budget kills such workers first (doc/reliability.md, item 14).
  bool retriable = false;
};

// The node daemons and the clock, as the requester needs them. CoreWorker
// implements it over its connections; tests fake it. io thread.
class LeaseTransport {
 public:
  virtual ~LeaseTransport() = default;
  // Whether our own node daemon is connected.
  virtual bool LocalNodeConnected() = 0;
  // What became of a lease request: sent, over the node's connection (what a
  // grant hands back; fakes may give null); Cancelled when shutting down; or
  // another error when the node cannot be reached.
  using SentCallback = std::function<void(absl::StatusOr<std::shared_ptr<Connection>>)>;
  // Sends a lease request for `shape` to the daemon at `target` ("" for ours)
  // without blocking (a connect to another node is asynchronous);
  // `grant_or_reject`: a spilled request, which that node grants or refuses.
  // `on_sent` runs once, maybe inside this call, before any reply. Every reply
  // then goes to `on_reply` until that returns false (true: a "waiting" note,
  // more to come); an envelope that is no leaseReply means the node went away
  // first. After an error `on_reply` never runs.
  virtual void SendLeaseRequest(const std::string& target, const LeaseShape& shape,
                                bool grant_or_reject,
                                std::function<bool(proto::Envelope::Reader)> on_reply,
                                SentCallback on_sent) = 0;
  // A spillback named the node id of the daemon at `address`.
  virtual void OnSpillback(const std::string& address, const NodeId& node) = 0;
  // Runs `fn` on the io thread after `delay`.
  virtual void After(std::chrono::milliseconds delay, std::function<void()> fn) = 0;
};

class LeaseRequester {
 public:
  // `reply`: granted, or refused with its error; valid during the call only.
  // `node`: the daemon that granted it (null when refused).
  using Callback =
      std::function<void(proto::LeaseReply::Reader reply, std::shared_ptr<Connection> node)>;
  struct Options {
    std::chrono::milliseconds retry_delay{20};            // Timeouts::lease_retry_delay
    std::chrono::milliseconds spillback_retry_delay{50};  // Timeouts::spillback_retry_delay
    int max_attempts = 100;  // spillbacks and retries before giving up
  };

  // `transport` outlives the requester.
  LeaseRequester(LeaseTransport& transport, Options options)
      : transport_(transport), options_(options) {}
  LeaseRequester(const LeaseRequester&) = delete;
  LeaseRequester& operator=(const LeaseRequester&) = delete;

  // Asks for a lease of `shape`: from our node, or from `target` after a
  // spillback. `done` runs once (see the invariant above).
  void Acquire(const LeaseShape& shape, Callback done, std::string target = "", int attempt = 0);

 private:
  struct Attempt {
    LeaseShape shape;
    Callback done;
    std::string target;  // "" for our own node
    int attempt = 0;
    std::shared_ptr<Connection> node;
  };
  // The request went out (or could not): keeps the node's connection, or
  // retries or refuses as an unreachable node calls for.
  void OnSent(const std::shared_ptr<Attempt>& pending,
              absl::StatusOr<std::shared_ptr<Connection>> node);
  // Returns true while more replies are expected (a "waiting" note).
  bool OnReply(const std::shared_ptr<Attempt>& pending, proto::Envelope::Reader msg);
  static void Refuse(const Callback& done, const std::string& why);

  LeaseTransport& transport_;
  Options options_;
  ThreadChecker io_thread_;
  absl::flat_hash_map<std::string, bool> warned_infeasible_;  // by lease shape name
};

}  // namespace lumen::runtime
