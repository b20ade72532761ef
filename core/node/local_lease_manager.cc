#include "core/node/local_lease_manager.h"

#include <algorithm>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "lumen/common/logging.h"
#include "lumen/common/proto_util.h"
#include "lumen/common/task_events.h"

namespace lumen::node {

using scheduler::LeaseRouteKind;
using scheduler::LocalResourceManager;
using scheduler::ResourceSet;

LocalLeaseManager::LocalLeaseManager(LocalLeaseManagerOptions options)
    : options_(std::move(options)),
      resources_(std::make_unique<LocalResourceManager>(options_.total)),
      gpus_(static_cast<int>(options_.total.Get(scheduler::kGPU))) {}

size_t LocalLeaseManager::queued_of(ClientId client) const {
  auto it = queued_per_client_.find(client);
  return it == queued_per_client_.end() ? 0 : it->second;
}

void LocalLeaseManager::Untrack(ClientId client) {
  auto it = queued_per_client_.find(client);
  if (it != queued_per_client_.end() && --it->second == 0) queued_per_client_.erase(it);
}

void LocalLeaseManager::Route(LeaseRequest request, bool replayed) {
  io_thread_.Check("LocalLeaseManager");
  LeaseClients& clients = *options_.clients;
  if (queued_of(request.client) >= options_.max_queued_per_client) {
    clients.Refuse(request.client, request.request_id,
                   absl::StrCat("this client already has ", queued_of(request.client),
                                " lease requests waiting on this node, the limit "
                                "(LUMEN_MAX_QUEUED_LEASES_PER_CLIENT)"));
    return;
  }
  ClusterState& cluster = *options_.cluster;
  if (request.group.empty() && !request.grant_or_reject) {
    // This node as the policy sees it: what is free minus what queued requests
    // will take once their workers are ready.
    ResourceSet free_now = resources_->available();
    for (const auto& queued : queue_) {
      if (!queued.group.empty()) continue;
      for (const auto& [name, qty] : queued.placement.ToMap()) {
        free_now.Set(name, std::max(0.0, free_now.Get(name) - qty));
      }
    }
    cluster.view().Upsert(cluster.local_key(),
                          scheduler::NodeResources{resources_->total(), free_now, !draining_});
  }
  scheduler::LeaseRouteRequest route_request{request.placement, request.strategy, request.group,
                                             request.bundle_index, request.grant_or_reject,
                                             request.name};
  scheduler::LeaseRoutingInputs in{
      cluster.view(),
      cluster.local_key(),
      *resources_,
      bundles_,
      cluster.bundle_placements(),
      [&](const std::string& group) { return cluster.IsRemovedGroup(group); },
      [&](const std::string& node) { return cluster.HasAddress(node); }};
  scheduler::LeaseRoute route = scheduler::RouteLease(route_request, in);
  switch (route.kind) {
    case LeaseRouteKind::kGrantHere:
      Enqueue(std::move(request));
      return;
    case LeaseRouteKind::kSpillback:
      clients.Spillback(request.client, request.request_id, route.node_id);
      return;
    case LeaseRouteKind::kPark:
      Park(std::move(request), replayed, route.infeasible);
      return;
    case LeaseRouteKind::kRefuse:
      clients.Refuse(request.client, request.request_id, route.error);
      return;
    case LeaseRouteKind::kRetry:
      clients.Retry(request.client, request.request_id);
      return;
  }
}

void LocalLeaseManager::Enqueue(LeaseRequest request) {
  Track(request.client);
  queue_.push_back(std::move(request));
  Dispatch();
}

void LocalLeaseManager::Park(LeaseRequest request, bool replayed, bool infeasible) {
  if (infeasible && !replayed) {
    // Tell the requester (its driver logs it) and keep it until a node fits.
    std::string totals;
    for (const auto& [id, node] : options_.cluster->view().nodes()) {
      if (node.alive) absl::StrAppend(&totals, totals.empty() ? "" : ", ", node.total.ToString());
    }
    options_.clients->Waiting(
        request.client, request.request_id,
        absl::StrCat("no node in the cluster can run ", request.name, ": it needs ",
                     request.placement.ToString(), " and the alive nodes have ", totals,
                     ". It waits until a node that fits joins (`lumen status` lists it)."));
  }
  Track(request.client);
  parked_.push_back(Parked{std::move(request), infeasible});
}

void LocalLeaseManager::ReplayParked() {
  io_thread_.Check("LocalLeaseManager");
  if (replaying_ || parked_.empty()) return;
  replaying_ = true;
  std::deque<Parked> parked;
  parked.swap(parked_);
  for (auto& p : parked) {
    Untrack(p.request.client);  // it counts again where it lands, not twice
    if (!options_.clients->IsConnected(p.request.client)) continue;
    if (options_.pool->FindJob(p.request.job) == nullptr) {
      options_.clients->Refuse(p.request.client, p.request.request_id,
                               "only a driver or worker of a live job can lease");
      continue;
    }
    Route(std::move(p.request), /*replayed=*/true);
  }
  replaying_ = false;
}

LocalResourceManager* LocalLeaseManager::PoolFor(const std::string& bundle) {
  if (bundle.empty()) return resources_.get();
  auto it = bundles_.find(bundle);
  return it == bundles_.end() ? nullptr : it->second.resources.get();
}

std::string LocalLeaseManager::FindBundleWithRoom(const std::string& group, int index,
                                                  const ResourceSet& need) {
  if (index >= 0) {
    std::string key = scheduler::BundleKey(group, index);
    auto it = bundles_.find(key);
    return it != bundles_.end() && it->second.committed ? key : "";
  }
  std::string any;
  for (const auto& [key, bundle] : bundles_) {
    if (!bundle.committed || !scheduler::IsBundleOf(key, group, -1)) continue;
    if (need.IsSubsetOf(bundle.resources->available())) return key;
    if (any.empty()) any = key;
  }
  return any;
}

void LocalLeaseManager::Dispatch() {
  io_thread_.Check("LocalLeaseManager");
  // One pass, O(queued requests + leases per requester): the requests that stay
  // move to `kept`, each job's queued requests are counted once up front, and
  // holders are asked for idle leases once per requester per pass.
  WorkerPool& pool = *options_.pool;
  absl::flat_hash_map<JobId, int> waiting;  // requests of each job still queued
  for (const auto& r : queue_) ++waiting[r.job];
  absl::flat_hash_set<ClientId> asked_for;
  auto ask_holders = [&](ClientId requester) {
    if (asked_for.insert(requester).second) AskHoldersForIdleLeases(requester);
  };
  std::deque<LeaseRequest> queue;
  queue.swap(queue_);
  std::deque<LeaseRequest> kept;
  for (auto& request : queue) {
    Job* job = pool.FindJob(request.job);
    if (!options_.clients->IsConnected(request.client) || job == nullptr) {
      --waiting[request.job];
      Untrack(request.client);
      continue;
    }
    LocalResourceManager* resources = resources_.get();
    std::string bundle;
    if (!request.group.empty()) {
      // Within the group's bundle(s) here, never the node's free resources.
      bundle = FindBundleWithRoom(request.group, request.bundle_index, request.placement);
      resources = bundle.empty() ? nullptr : PoolFor(bundle);
    }
    if (resources == nullptr || !request.placement.IsSubsetOf(resources->available())) {
      ask_holders(request.client);
      kept.push_back(std::move(request));
      continue;
    }
    if (!pool.HasIdle(request.job)) {
      // Start enough workers for the requests of this job that fit right now.
      if (job->starting < std::min(waiting[request.job], 64)) {
        std::string why;
        if (!pool.StartWorker(request.job, &why)) {
          // Answered outside this pass.
          options_.post([this, job_id = request.job, why] {
            if (options_.pool->FindJob(job_id) != nullptr) FailJobRequests(job_id, why);
          });
        }
      }
      kept.push_back(std::move(request));
      continue;
    }
    // The GPUs themselves: whole ones alone, fractions sharing one device.
    std::optional<std::vector<int>> gpu_ids = gpus_.Assign(request.resources.Get(scheduler::kGPU));
    if (!gpu_ids) {
      ask_holders(request.client);
      kept.push_back(std::move(request));
      continue;
    }
    // Placement (a superset of resources) fits, checked above.
    [[maybe_unused]] bool acquired = resources->TryAcquire(request.resources);
    uint64_t lease_id = next_lease_id_++;
    Worker* w = pool.TakeIdle(request.job, lease_id);
    leases_[lease_id] = Lease{w->id, request.resources, request.client, false, false,
                              request.detached, *gpu_ids, bundle};
    options_.clients->Grant(request.client, request.request_id,
                            LeaseGrant{lease_id, w->id, w->address, w->pid, *gpu_ids});
    TaskEvents().Record(TaskEventKind::kLeaseGranted, TaskId::Nil(), 0, request.name, {.worker = w->id, .worker_pid = w->pid});
    --waiting[request.job];
    Untrack(request.client);
  }
  // Requests queued while this pass ran go after the ones that were waiting.
  for (auto& late : queue_) kept.push_back(std::move(late));
  queue_.swap(kept);
}

void LocalLeaseManager::AskHoldersForIdleLeases(ClientId requester) {
  // Holders keep idle leases briefly for their next task; when a request waits
  // for resources, ask each holder (once per lease) to give idle ones back.
  absl::flat_hash_set<ClientId> holders;
  for (auto& [lease_id, lease] : leases_) {
    if (lease.reclaim_asked || lease.holder == requester) continue;
    lease.reclaim_asked = true;
    holders.insert(lease.holder);
  }
  for (ClientId holder : holders) {
    if (holder != 0 && options_.clients->IsConnected(holder)) options_.clients->Reclaim(holder);
  }
}

void LocalLeaseManager::FreeLeaseResources(const Lease& lease) {
  ResourceSet held = lease.resources;
  if (lease.cpu_released) held.Set(scheduler::kCPU, 0);
  // A removed bundle gave all of its resources back already.
  if (LocalResourceManager* resources = PoolFor(lease.bundle)) resources->Release(held);
  gpus_.Release(lease.gpu_ids, lease.resources.Get(scheduler::kGPU));
}

void LocalLeaseManager::EndLease(uint64_t lease_id, bool kill_worker, const char* reason) {
  auto it = leases_.find(lease_id);
  if (it == leases_.end()) return;
  Lease lease = std::move(it->second);
  leases_.erase(it);
  FreeLeaseResources(lease);
  options_.pool->ReturnToIdle(lease.worker);
  // The holder may still have work on it: it must not be reused.
  if (kill_worker) options_.pool->Kill(lease.worker, reason);
}

void LocalLeaseManager::ReturnLease(ClientId holder, uint64_t lease_id, bool kill) {
  io_thread_.Check("LocalLeaseManager");
  auto it = leases_.find(lease_id);
  if (it == leases_.end() || it->second.holder != holder) return;
  EndLease(lease_id, kill, "its lease holder ended the lease");
  Dispatch();
}

LocalLeaseManager::Lease* LocalLeaseManager::LeaseOf(const WorkerId& worker) {
  Worker* w = options_.pool->Find(worker);
  if (w == nullptr || w->state != WorkerState::kLeased) return nullptr;
  auto it = leases_.find(w->lease_id);
  return it == leases_.end() ? nullptr : &it->second;
}

void LocalLeaseManager::OnWorkerBlocked(const WorkerId& worker) {
  io_thread_.Check("LocalLeaseManager");
  Lease* lease = LeaseOf(worker);
  if (lease == nullptr || lease->cpu_released) return;
  LocalResourceManager* resources = PoolFor(lease->bundle);
  if (resources == nullptr) return;
  // A worker waiting in Get gives its CPU back so its children can run.
  ResourceSet cpu;
  cpu.Set(scheduler::kCPU, lease->resources.Get(scheduler::kCPU));
  resources->Release(cpu);
  lease->cpu_released = true;
  Dispatch();
}

void LocalLeaseManager::OnWorkerUnblocked(const WorkerId& worker) {
  io_thread_.Check("LocalLeaseManager");
  Lease* lease = LeaseOf(worker);
  if (lease == nullptr || !lease->cpu_released) return;
  LocalResourceManager* resources = PoolFor(lease->bundle);
  if (resources == nullptr) return;
  // Take it back if free; otherwise run oversubscribed until the lease ends
  // (and the lease then gives back no CPU).
  ResourceSet cpu;
  cpu.Set(scheduler::kCPU, lease->resources.Get(scheduler::kCPU));
  if (resources->TryAcquire(cpu)) lease->cpu_released = false;
}

void LocalLeaseManager::OnClientClosed(ClientId client) {
  io_thread_.Check("LocalLeaseManager");
  // Leases held by this client end; their workers may still run its tasks, so
  // they are stopped rather than reused. A detached actor's lease is orphaned.
  std::vector<uint64_t> held;
  for (auto& [lease_id, lease] : leases_) {
    if (lease.holder != client) continue;
    if (lease.detached) {
      lease.holder = 0;
    } else {
      held.push_back(lease_id);
    }
  }
  for (uint64_t lease_id : held) EndLease(lease_id, true, "its lease holder disconnected");
  auto gone = [client](const LeaseRequest& r) { return r.client == client; };
  queue_.erase(std::remove_if(queue_.begin(), queue_.end(), gone), queue_.end());
  parked_.erase(std::remove_if(parked_.begin(), parked_.end(),
                               [&](const Parked& p) { return gone(p.request); }),
                parked_.end());
  queued_per_client_.erase(client);
}

void LocalLeaseManager::OnWorkerGone(const Worker& worker, bool job_start_failed,
                                     const std::string& why) {
  io_thread_.Check("LocalLeaseManager");
  if (worker.state == WorkerState::kLeased) {
    auto it = leases_.find(worker.lease_id);
    if (it != leases_.end()) {
      FreeLeaseResources(it->second);
      leases_.erase(it);
    }
  }
  if (job_start_failed) FailJobRequests(worker.job, why);
}

void LocalLeaseManager::FailJobRequests(const JobId& job, const std::string& why) {
  io_thread_.Check("LocalLeaseManager");
  Job* entry = options_.pool->FindJob(job);
  std::string message = absl::StrCat(
      "workers of this job keep exiting before they connect (last one ", why, "): does ",
      entry != nullptr ? entry->exe_path : "", " call lumen::Init(argc, argv) first thing in main?");
  LUMEN_LOG(ERROR) << message;
  for (auto it = queue_.begin(); it != queue_.end();) {
    if (it->job != job) {
      ++it;
      continue;
    }
    options_.clients->Refuse(it->client, it->request_id, message);
    Untrack(it->client);
    it = queue_.erase(it);
  }
  if (entry != nullptr) entry->failed_starts = 0;
}

bool LocalLeaseManager::IsDetached(const Worker& w) const {
  if (w.state != WorkerState::kLeased) return false;
  auto it = leases_.find(w.lease_id);
  return it != leases_.end() && it->second.detached;
}

absl::Status LocalLeaseManager::PrepareBundles(
    const std::string& group, const std::vector<std::pair<int, ResourceSet>>& bundles) {
  io_thread_.Check("LocalLeaseManager");
  // All of them or none: reserve each bundle out of the node's free resources.
  absl::Status status;
  std::vector<std::string> done;
  for (const auto& [index, need] : bundles) {
    std::string key = scheduler::BundleKey(group, index);
    if (bundles_.contains(key)) continue;  // a repeated prepare: keep it as it is
    if (options_.testing_refuse_prepares > 0) {
      --options_.testing_refuse_prepares;
      status = absl::UnavailableError("refused on purpose (test hook: refuse_prepares)");
      break;
    }
    if (!resources_->TryAcquire(need)) {
      status = absl::ResourceExhaustedError(
          absl::StrCat("bundle ", index, " needs ", need.ToString(), " but only ",
                       resources_->available().ToString(), " is free here"));
      break;
    }
    bundles_[key] = scheduler::ReservedBundle{std::make_unique<LocalResourceManager>(need), false};
    done.push_back(key);
  }
  if (!status.ok()) {
    for (const auto& key : done) RemoveBundle(key);
  }
  return status;
}

absl::Status LocalLeaseManager::CommitBundles(const std::string& group,
                                              const std::vector<int>& indices) {
  io_thread_.Check("LocalLeaseManager");
  for (int index : indices) {
    std::string key = scheduler::BundleKey(group, index);
    auto it = bundles_.find(key);
    if (it == bundles_.end()) return absl::NotFoundError("bundle was not prepared here");
    it->second.committed = true;
    options_.cluster->bundle_placements()[key].node_id = options_.cluster->local_key();
  }
  return absl::OkStatus();
}

void LocalLeaseManager::CancelBundles(const std::string& group, const std::vector<int>& indices) {
  io_thread_.Check("LocalLeaseManager");
  for (int index : indices) RemoveBundle(scheduler::BundleKey(group, index));
}

void LocalLeaseManager::RemoveGroup(const std::string& group) {
  io_thread_.Check("LocalLeaseManager");
  std::vector<std::string> keys;
  for (const auto& [key, bundle] : bundles_) {
    if (scheduler::IsBundleOf(key, group, -1)) keys.push_back(key);
  }
  for (const auto& key : keys) RemoveBundle(key);
}

void LocalLeaseManager::RemoveBundle(const std::string& key) {
  auto it = bundles_.find(key);
  if (it == bundles_.end()) return;
  // What runs in it ends; the reserved resources go back to the node.
  std::vector<uint64_t> ended;
  for (const auto& [lease_id, lease] : leases_) {
    if (lease.bundle == key) ended.push_back(lease_id);
  }
  for (uint64_t lease_id : ended) {
    Lease lease = std::move(leases_[lease_id]);
    leases_.erase(lease_id);
    gpus_.Release(lease.gpu_ids, lease.resources.Get(scheduler::kGPU));
    if (Worker* w = options_.pool->Find(lease.worker)) {
      w->lease_id = 0;
      options_.pool->Kill(w->id, "its placement group bundle was removed");
    }
  }
  resources_->Release(it->second.resources->total());
  bundles_.erase(it);
  options_.cluster->bundle_placements().erase(key);
  std::string group = key.substr(0, key.rfind('/'));
  for (const auto& [k, b] : bundles_) {
    if (scheduler::IsBundleOf(k, group, -1)) return;
  }
  bool removed = options_.cluster->IsRemovedGroup(group);
  for (auto qit = queue_.begin(); qit != queue_.end();) {
    if (qit->group != group) {
      ++qit;
      continue;
    }
    if (removed) {
      options_.clients->Refuse(qit->client, qit->request_id, "its placement group was removed");
    } else {
      // Rolled back here (it may be placed again elsewhere): ask again.
      options_.clients->Retry(qit->client, qit->request_id);
    }
    Untrack(qit->client);
    qit = queue_.erase(qit);
  }
}

std::vector<LocalLeaseManager::Demand> LocalLeaseManager::InfeasibleDemand() const {
  // Grouped by name and shape ("CPU=1;GPU=2;").
  std::map<std::pair<std::string, std::string>, Demand> demand;
  for (const auto& p : parked_) {
    if (!p.infeasible || !options_.clients->IsConnected(p.request.client)) continue;
    Demand& d = demand[{p.request.name, ResourceShapeKey(p.request.placement_map)}];
    d.name = p.request.name;
    ++d.count;
    d.resources = p.request.placement_map;
  }
  std::vector<Demand> out;
  for (auto& [key, d] : demand) out.push_back(std::move(d));
  return out;
}

}  // namespace lumen::node
