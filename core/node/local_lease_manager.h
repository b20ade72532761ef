// LocalLeaseManager: this node's local scheduler. It takes worker-lease
// requests, routes them (scheduler::RouteLease: grant here, spill back, park,
// refuse), queues the ones granted here until resources and an idle worker of
// the job are free, grants them, and takes the resources back when a lease
// ends. A worker blocked in Get lends its CPU back until it unblocks. It also
// holds the placement-group bundles reserved on this node (prepare, commit,
// cancel from the head) and the requests parked until the cluster changes.
//
//   LocalLeaseManager leases({.local_node_id = id, .total = total, .pool = &pool,
//                             .clients = &replies, .cluster = &cluster, ...});
//   leases.Submit(request);            // answered through LeaseClients
//   leases.OnWorkerBlocked(worker_id);  // its CPU goes back to the node
//   leases.ReturnLease(client, lease_id, /*kill=*/false);
//
// Lease lifecycle: requested -> (parked <->) queued -> granted (held by a
// client; its CPU lent back while blocked) -> returned / killed / holder gone.
// Every queued or parked request counts against its client's cap
// (max_queued_per_client) until it leaves the queues. An actor's lease takes a
// prestarted worker for good (it is killed when the lease ends, never handed to
// later work), so the pool is refilled in the background after each such take.
//
// Only on the node daemon's io thread (checked in debug builds).
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "lumen/common/ids.h"
#include "lumen/common/thread_checker.h"
#include "lumen/proto/lumen.capnp.h"
#include "lumen/scheduler/gpu_assigner.h"
#include "lumen/scheduler/lease_router.h"
#include "lumen/scheduler/resource_set.h"
#include "core/node/cluster_state.h"
#include "core/node/lease_queue.h"
#include "core/node/lease_request.h"
#include "core/node/worker_pool.h"

namespace lumen::node {

// A granted lease, as its holder learns it.
struct LeaseGrant {
  uint64_t lease_id = 0;
  WorkerId worker;
  std::string worker_address;
  pid_t worker_pid = 0;
  std::vector<int> gpu_ids;
};

// How the lease manager answers clients (the daemon implements it over their
// connections; tests record the calls). Calls for a client that went away are
// dropped by the implementation.
class LeaseClients {
 public:
  virtual ~LeaseClients() = default;
  virtual bool IsConnected(ClientId client) = 0;
  virtual void Grant(ClientId client, uint64_t request_id, const LeaseGrant& grant) = 0;
  virtual void Refuse(ClientId client, uint64_t request_id, const std::string& why) = 0;
  virtual void Spillback(ClientId client, uint64_t request_id, const std::string& node_id) = 0;
  // Not here after all: the requester starts over at its own node.
  virtual void Retry(ClientId client, uint64_t request_id) = 0;
  // No node can run it yet: it waits (`why` tells the requester).
  virtual void Waiting(ClientId client, uint64_t request_id, const std::string& why) = 0;
  // Asks a holder to give back the leases it keeps idle.
  virtual void Reclaim(ClientId holder) = 0;
};

struct LocalLeaseManagerOptions {
  scheduler::ResourceSet total;  // this node's resources
  WorkerPool* pool = nullptr;        // borrowed; outlives the manager
  LeaseClients* clients = nullptr;   // borrowed; outlives the manager
  ClusterState* cluster = nullptr;   // borrowed; outlives the manager
  // Lease requests one client may have queued or parked here.
  size_t max_queued_per_client = 10000;
  // Runs a task later on the io thread (outside the current call), under
  // `name` (a string literal, as lumen::Post takes it: each post of the
  // manager has its own).
  std::function<void(const char* name, std::function<void()>)> post;
  // Test hook: refuse this many bundle prepares.
  int testing_refuse_prepares = 0;
};

class LocalLeaseManager {
 public:
  // Worker processes one dispatch pass starts at most (each is a fork of the
  // daemon on its loop); a pass that wanted more posts another.
  static constexpr size_t kMaxStartsPerPass = 8;

  explicit LocalLeaseManager(LocalLeaseManagerOptions options);

  // Routes and queues a request; every outcome is answered through LeaseClients.
  void Submit(LeaseRequest request) { Route(std::move(request), /*replayed=*/false); }
  // Grants what can be granted now (idempotent; call after anything frees).
  void Dispatch();
  // The holder returns (or, `kill`: abandons, its worker must not be reused) a lease.
  void ReturnLease(ClientId holder, uint64_t lease_id, bool kill);
  // The worker of a lease waits in Get (gives its CPU back) / runs again
  // (takes it back if free; otherwise runs oversubscribed until the lease ends).
  void OnWorkerBlocked(const WorkerId& worker);
  void OnWorkerUnblocked(const WorkerId& worker);
  // A client's connection closed: its leases end (their workers are killed,
  // detached actors' leases are kept, orphaned), its queued and parked requests
  // go. The caller dispatches afterwards (after ending the client's job, if any).
  void OnClientClosed(ClientId client);
  // A worker's process was reaped: its lease (if any) gives its resources back.
  void OnWorkerGone(const Worker& worker, bool job_start_failed, const std::string& why);
  // Refuses the job's queued requests (its workers keep failing to start).
  void FailJobRequests(const JobId& job, const std::string& why);
  // Routes parked requests again (the cluster changed).
  void ReplayParked();
  // Whether `worker` runs a detached actor (it outlives its job).
  bool IsDetached(const Worker& worker) const;

  // --- placement-group bundles (from the head) ---
  // Reserves all of them or none. Errors: ResourceExhausted, a bad size, the test hook.
  // `commit`: commits them too once all are reserved (a group on this node alone).
  [[nodiscard]] absl::Status PrepareBundles(
      const std::string& group, const std::vector<std::pair<int, scheduler::ResourceSet>>& bundles,
      bool commit = false);
  [[nodiscard]] absl::Status CommitBundles(const std::string& group, const std::vector<int>& indices);
  void CancelBundles(const std::string& group, const std::vector<int>& indices);
  // The group was removed: its bundles here go, what runs in them ends.
  void RemoveGroup(const std::string& group);

  // --- for reports ---
  const scheduler::LocalResourceManager& resources() const { return *resources_; }
  size_t num_queued() const { return queue_.size() + parked_.size(); }
  // Queued requests looked at by dispatch passes so far (tests count work).
  uint64_t TEST_dispatch_visits() const { return queue_.TEST_visits(); }
  // Lease ids kept for asking holders to give idle leases back (bounded by
  // twice the leases held, plus one per holder).
  size_t TEST_unasked_entries() const;
  size_t num_leases() const { return leases_.size(); }
  size_t queued_of(ClientId client) const;
  struct Demand {
    std::string name;
    uint32_t count = 0;
    std::map<std::string, double> resources;
  };
  // Parked requests no node can run, grouped by name and shape.
  std::vector<Demand> InfeasibleDemand() const;
  // Queued requests that fit this node but wait for busy resources or a
  // worker, grouped by shape and the name of the oldest of each kind.
  std::vector<Demand> PendingDemand() const;
  void set_draining(bool draining) { draining_ = draining; }
  // While paused nothing is granted (requests wait in the queue); the memory
  // monitor pauses grants after it killed a worker. Dispatch after resuming.
  void set_grants_paused(bool paused) { grants_paused_ = paused; }
  // Whether the lease's work may be retried (false for unknown leases).
  bool IsRetriable(uint64_t lease_id) const;
  // The holder of `worker`'s lease when it is a normal-task lease: the owner
  // of the task results that worker stores now. 0: not leased, or an actor's
  // lease (its calls' results belong to each caller).
  ClientId TaskLeaseHolder(const WorkerId& worker);

 private:
  struct Lease {
    WorkerId worker;
    scheduler::ResourceSet resources;
    ClientId holder = 0;
    bool cpu_released = false;   // its worker is blocked in Get
    bool reclaim_asked = false;  // its holder was asked to return it when idle
    bool detached = false;
    std::vector<int> gpu_ids;
    std::string bundle;  // "group/index" it runs in, or ""
    bool retriable = false;  // LeaseRequest::retriable
    bool actor = false;      // LeaseRequest::actor: its worker exits with the lease
  };
  struct Parked {
    LeaseRequest request;
    bool infeasible = false;  // no node fits it (else: its group is not placed yet)
  };

  void Route(LeaseRequest request, bool replayed);
  void Enqueue(LeaseRequest request);
  void Park(LeaseRequest request, bool replayed, bool infeasible);
  void Track(ClientId client) { ++queued_per_client_[client]; }
  void Untrack(ClientId client);
  scheduler::LocalResourceManager* PoolFor(const std::string& bundle);
  std::string FindBundleWithRoom(const std::string& group, int index,
                                 const scheduler::ResourceSet& need);
  void RemoveBundle(const std::string& key);
  void DispatchPass();
  void AddLease(uint64_t lease_id, Lease lease);
  // Posts WorkerPool::Refill for `job` (an actor's lease took a worker).
  void RefillLater(const JobId& job);
  // Removes a lease from the table and its holder's index; returns it.
  Lease TakeLease(absl::flat_hash_map<uint64_t, Lease>::iterator it);
  void EndLease(uint64_t lease_id, bool kill_worker, const char* reason);
  void FreeLeaseResources(const Lease& lease);
  void AskHoldersForIdleLeases(ClientId requester);
  Lease* LeaseOf(const WorkerId& worker);

  ThreadChecker io_thread_;
  LocalLeaseManagerOptions options_;
  std::unique_ptr<scheduler::LocalResourceManager> resources_;
  scheduler::GpuAssigner gpus_;
  absl::flat_hash_map<std::string, scheduler::ReservedBundle> bundles_;  // "group/index"
  absl::flat_hash_map<uint64_t, Lease> leases_;
  // lease ids by holder (0: orphaned detached leases), and the leases each
  // holder has not been asked to give back yet (may name ended leases; never
  // actors' leases; compacted in AddLease).
  absl::flat_hash_map<ClientId, absl::flat_hash_set<uint64_t>> leases_by_holder_;
  absl::flat_hash_map<ClientId, std::vector<uint64_t>> unasked_by_holder_;
  LeaseQueue queue_;
  std::deque<Parked> parked_;
  absl::flat_hash_map<ClientId, size_t> queued_per_client_;
  uint64_t next_lease_id_ = 1;
  bool replaying_ = false;
  bool dispatching_ = false;
  bool dispatch_again_ = false;
  bool draining_ = false;
  bool grants_paused_ = false;
  bool starts_posted_ = false;  // a Dispatch to start more workers is posted
};

// Writes `demand` into `out` (sized demand.size()): NodeStats.infeasible, .pending.
void FillDemand(const std::vector<LocalLeaseManager::Demand>& demand,
                capnp::List<proto::Demand>::Builder out);

}  // namespace lumen::node
