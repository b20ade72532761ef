// LeaseQueue: the lease requests a node daemon granted here and holds until
// resources and an idle worker of the job are free, kept in one FIFO queue per
// class of equivalent requests (same job, shape, placement and bundle), so
// that a dispatch pass looks at the front of each class instead of at every
// request.
//
//   LeaseQueue queue;
//   queue.Push(std::move(request));
//   queue.Pass([&](LeaseRequest& front, const LeaseQueue::ClassView& cls) {
//     return can_grant(front) ? LeaseQueue::Verdict::kTake : LeaseQueue::Verdict::kBlocked;
//   });
//
// Requests of one class are interchangeable for dispatch: if the front cannot
// be granted for want of resources, GPUs or a worker, none behind it can, so a
// pass skips the rest of the class. Across classes a pass goes oldest front
// first, so requests are granted in submission order as far as resources allow.
//
// Costs (Q requests queued, C classes, G taken or dropped in a pass):
// Push O(1) amortised, Pass O(C log C + G log C), queued_of_job O(1),
// queued_placement O(1) (kept as requests come and go), RemoveIf O(Q).
//
// Only on the node daemon's io thread (not thread-safe).
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "core/node/lease_request.h"
#include "lumen/common/ids.h"
#include "lumen/scheduler/resource_set.h"

namespace lumen::node {

class LeaseQueue {
 public:
  enum class Verdict {
    kTake,     // granted (or refused) by the caller: leaves the queue
    kDrop,     // its client or job is gone: leaves the queue
    kBlocked,  // cannot be granted now: the rest of its class waits too
  };
  // What the visitor may ask about the class of the front it is given.
  class ClassView {
   public:
    size_t size() const;
    // A client other than `client` with a request in this class, if any.
    std::optional<ClientId> AnotherClient(ClientId client) const;

   private:
    friend class LeaseQueue;
    explicit ClassView(const void* cls) : cls_(cls) {}
    const void* cls_;
  };
  using Visitor = std::function<Verdict(LeaseRequest& front, const ClassView& cls)>;

  LeaseQueue();
  ~LeaseQueue();
  LeaseQueue(const LeaseQueue&) = delete;
  LeaseQueue& operator=(const LeaseQueue&) = delete;

  void Push(LeaseRequest request);
  // One dispatch pass: visits the oldest front of the classes not blocked yet
  // in this pass until every class is blocked or empty. A request pushed
  // during the pass is visited by the next one. Not reentrant.
  void Pass(const Visitor& visit);
  // Removes every request `remove` selects, class by class, after telling
  // `removed` about it (which may answer its client). Not from a visitor.
  void RemoveIf(const std::function<bool(const LeaseRequest&)>& remove,
                const std::function<void(const LeaseRequest&)>& removed);

  size_t size() const { return size_; }
  size_t queued_of_job(const JobId& job) const;
  // Calls `visit` with the front request of each class and the class's size
  // (what `lumen status` shows as pending demand). O(C).
  void ForEachClass(const std::function<void(const LeaseRequest& front, size_t size)>& visit) const;
  // The sum of the placements of the queued requests outside placement groups
  // (what they will take from the node's own resources).
  const scheduler::ResourceSet& queued_placement() const { return queued_placement_; }

  // Requests looked at by passes so far (fronts visited): what the
  // regression tests count instead of timing.
  uint64_t TEST_visits() const { return visits_; }

 private:
  struct Entry {
    uint64_t seq = 0;
    LeaseRequest request;
  };
  struct Class;
  static std::string ClassKey(const LeaseRequest& request);
  void Forget(Class& cls, const LeaseRequest& request);

  std::map<std::string, std::unique_ptr<Class>> classes_;  // node-based: stable under inserts
  absl::flat_hash_map<JobId, size_t> per_job_;
  scheduler::ResourceSet queued_placement_;
  size_t size_ = 0;
  uint64_t next_seq_ = 0;
  uint64_t visits_ = 0;
  bool in_pass_ = false;
};

}  // namespace lumen::node
