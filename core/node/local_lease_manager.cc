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
  if (request.group.empty()) {
    // This node as the policy sees it (and a spilled request's grant-or-reject
    // check): what is free minus what queued requests will take once their
    // workers are ready.
    // O(resource kinds): the queue keeps the sum of its requests' placements.
    ResourceSet free_now = resources_->available();
    for (const auto& [name, qty] : queue_.queued_placement().ToMap()) {
      free_now.Set(name, std::max(0.0, free_now.Get(name) - qty));
    }
    // Our store use is not the lease manager's: keep what ClusterState has.
    const scheduler::NodeResources* self = cluster.view().Find(cluster.local_key());
    cluster.view().Upsert(
        cluster.local_key(),
        scheduler::NodeResources{resources_->total(), free_now, !draining_,
                                 self != nullptr ? self->store_used : 0,
                                 self != nullptr ? self->store_capacity : 0});
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
  queue_.Push(std::move(request));
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
  // A dispatch asked for while one runs (a callback reentering) runs after it.
  if (dispatching_) {
    dispatch_again_ = true;
    return;
  }
  dispatching_ = true;
  do {
    dispatch_again_ = false;
    DispatchPass();
  } while (dispatch_again_);
  dispatching_ = false;
}

bool LocalLeaseManager::IsRetriable(uint64_t lease_id) const {
  auto it = leases_.find(lease_id);
  return it != leases_.end() && it->second.retriable;
}

void LocalLeaseManager::DispatchPass() {
  if (grants_paused_) return;  // the memory monitor's backoff; it dispatches when it ends
  // One pass over the fronts of the queue's classes, oldest first: a class
  // whose front cannot be granted is skipped whole (its requests are
  // equivalent), so a pass costs O(classes + grants), not O(queued requests).
  // Holders are asked for idle leases once per requester per pass.
  using Verdict = LeaseQueue::Verdict;
  WorkerPool& pool = *options_.pool;
  absl::flat_hash_set<ClientId> asked_for;
  size_t starts_this_pass = 0;
  bool more_to_start = false;
  auto ask_holders = [&](ClientId requester) {
    if (asked_for.insert(requester).second) AskHoldersForIdleLeases(requester);
  };
  auto blocked = [&](const LeaseRequest& front, const LeaseQueue::ClassView& cls) {
    // Asking for X reaches every holder but X; a second requester of the
    // class reaches X's own idle leases too, as asking for each would.
    ask_holders(front.client);
    if (auto other = cls.AnotherClient(front.client)) ask_holders(*other);
    return Verdict::kBlocked;
  };
  queue_.Pass([&](LeaseRequest& request, const LeaseQueue::ClassView& cls) {
    Job* job = pool.FindJob(request.job);
    if (!options_.clients->IsConnected(request.client) || job == nullptr) {
      Untrack(request.client);
      return Verdict::kDrop;
    }
    LocalResourceManager* resources = resources_.get();
    std::string bundle;
    if (!request.group.empty()) {
      // Within the group's bundle(s) here, never the node's free resources.
      bundle = FindBundleWithRoom(request.group, request.bundle_index, request.placement);
      resources = bundle.empty() ? nullptr : PoolFor(bundle);
    }
    if (resources == nullptr || !request.placement.IsSubsetOf(resources->available())) {
      return blocked(request, cls);
    }
    if (!pool.HasIdle(request.job)) {
      // Start enough workers for the requests of this job that fit right now
      // (every request of the class fits as its front does), at most 64
      // starting at once, and at most kMaxStartsPerPass in this pass: each
      // start forks the daemon on its loop, which costs more the more workers
      // it has (their descriptors and its memory are copied), so the rest
      // start in later handlers with other events served in between.
      const int cap = static_cast<int>(std::min<size_t>(queue_.queued_of_job(request.job), 64));
      size_t to_start = std::min<size_t>(cls.size(), std::max(0, cap - job->starting));
      if (to_start > kMaxStartsPerPass - starts_this_pass) {
        to_start = kMaxStartsPerPass - starts_this_pass;
        more_to_start = true;
      }
      starts_this_pass += to_start;
      for (size_t i = 0; i < to_start; ++i) {
        std::string why;
        if (!pool.StartWorker(request.job, &why)) {
          // Answered outside this pass.
          options_.post("node.worker_start_failed", [this, job_id = request.job, why] {
            if (options_.pool->FindJob(job_id) != nullptr) FailJobRequests(job_id, why);
          });
          break;
        }
      }
      return Verdict::kBlocked;
    }
    // The GPUs themselves: whole ones alone, fractions sharing one device.
    std::optional<std::vector<int>> gpu_ids = gpus_.Assign(request.resources.Get(scheduler::kGPU));
    if (!gpu_ids) return blocked(request, cls);
    // Placement (a superset of resources) fits, checked above.
    [[maybe_unused]] bool acquired = resources->TryAcquire(request.resources);
    uint64_t lease_id = next_lease_id_++;
    Worker* w = pool.TakeIdle(request.job, lease_id);
    AddLease(lease_id, Lease{w->id, request.resources, request.client, false, false,
                             request.detached, *gpu_ids, bundle, request.retriable,
                             request.actor});
    if (request.actor) RefillLater(request.job);
    options_.clients->Grant(request.client, request.request_id,
                            LeaseGrant{lease_id, w->id, w->address, w->pid, *gpu_ids});
    TaskEvents().Record(TaskEventKind::kLeaseGranted, TaskId::Nil(), 0, request.name, {.worker = w->id, .worker_pid = w->pid});
    Untrack(request.client);
    return Verdict::kTake;
  });
  if (more_to_start && !starts_posted_) {
    // The workers this pass did not start: a later handler's pass starts them.
    starts_posted_ = true;
    options_.post("node.dispatch_more_starts", [this] {
      starts_posted_ = false;
      Dispatch();
    });
  }
}

void LocalLeaseManager::RefillLater(const JobId& job) {
  // Outside the dispatch pass, so the grant goes out before the fork.
  options_.post("node.refill_workers", [this, job] {
    std::string why;
    options_.pool->Refill(job, &why);
    if (!why.empty() && options_.pool->FindJob(job) != nullptr) FailJobRequests(job, why);
  });
}

void LocalLeaseManager::AddLease(uint64_t lease_id, Lease lease) {
  auto& held = leases_by_holder_[lease.holder];
  held.insert(lease_id);
  // An actor's lease is never idle (it lasts as long as the actor): asking
  // its holder for it back would be pointless.
  if (!lease.actor) {
    std::vector<uint64_t>& unasked = unasked_by_holder_[lease.holder];
    // Only another requester's wait clears a holder's list: a lone client
    // taking and returning leases would grow it by one id per lease ever
    // granted. Drop the ended ones once it is twice what the holder holds:
    // O(1) amortised per lease, at most 2 x (held + 1) ids per holder.
    if (unasked.size() >= 2 * held.size()) {
      std::erase_if(unasked, [&](uint64_t id) { return !held.contains(id); });
    }
    unasked.push_back(lease_id);
  }
  leases_[lease_id] = std::move(lease);
}

size_t LocalLeaseManager::TEST_unasked_entries() const {
  size_t n = 0;
  for (const auto& [holder, ids] : unasked_by_holder_) n += ids.size();
  return n;
}

LocalLeaseManager::Lease LocalLeaseManager::TakeLease(
    absl::flat_hash_map<uint64_t, Lease>::iterator it) {
  uint64_t lease_id = it->first;
  Lease lease = std::move(it->second);
  leases_.erase(it);
  auto held = leases_by_holder_.find(lease.holder);
  if (held != leases_by_holder_.end()) {
    held->second.erase(lease_id);
    if (held->second.empty()) leases_by_holder_.erase(held);
  }
  return lease;
}

void LocalLeaseManager::AskHoldersForIdleLeases(ClientId requester) {
  // Holders keep idle leases briefly for their next task; when a request waits
  // for resources, ask each holder (once per lease) to give idle ones back.
  // Only holders with leases not asked about yet are looked at, and each lease
  // is marked once: O(holders with new leases) per call, O(1) per lease.
  std::vector<ClientId> holders;
  for (auto it = unasked_by_holder_.begin(); it != unasked_by_holder_.end();) {
    if (it->first == requester) {
      ++it;
      continue;
    }
    bool any = false;
    for (uint64_t lease_id : it->second) {
      auto lease = leases_.find(lease_id);
      if (lease == leases_.end() || lease->second.holder != it->first ||
          lease->second.reclaim_asked) {
        continue;  // ended, orphaned or asked already
      }
      lease->second.reclaim_asked = true;
      any = true;
    }
    if (any) holders.push_back(it->first);
    unasked_by_holder_.erase(it++);
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
  Lease lease = TakeLease(it);
  FreeLeaseResources(lease);
  options_.pool->ReturnToIdle(lease.worker);
  // The holder may still have work on it: it must not be reused. Nor is an
  // actor's worker (its process holds the actor's state), whatever the holder asked.
  if (lease.actor && !kill_worker) {
    kill_worker = true;
    reason = "its actor's lease ended";
  }
  if (kill_worker) options_.pool->Kill(lease.worker, reason);
}

void LocalLeaseManager::ReturnLease(ClientId holder, uint64_t lease_id, bool kill) {
  io_thread_.Check("LocalLeaseManager");
  auto it = leases_.find(lease_id);
  if (it == leases_.end() || it->second.holder != holder) return;
  EndLease(lease_id, kill, "its lease holder ended the lease");
  Dispatch();
}

ClientId LocalLeaseManager::TaskLeaseHolder(const WorkerId& worker) {
  io_thread_.Check("LocalLeaseManager");
  Lease* lease = LeaseOf(worker);
  return lease == nullptr || lease->actor ? 0 : lease->holder;
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
  // O(its leases + queued and parked requests).
  std::vector<uint64_t> held, orphaned;
  auto by_holder = leases_by_holder_.find(client);
  if (by_holder != leases_by_holder_.end()) {
    for (uint64_t lease_id : by_holder->second) {
      Lease& lease = leases_.at(lease_id);
      if (lease.detached) {
        lease.holder = 0;
        orphaned.push_back(lease_id);
      } else {
        held.push_back(lease_id);
      }
    }
    leases_by_holder_.erase(by_holder);
  }
  for (uint64_t lease_id : orphaned) leases_by_holder_[0].insert(lease_id);
  unasked_by_holder_.erase(client);
  for (uint64_t lease_id : held) EndLease(lease_id, true, "its lease holder disconnected");
  auto gone = [client](const LeaseRequest& r) { return r.client == client; };
  queue_.RemoveIf(gone, [](const LeaseRequest&) {});
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
    if (it != leases_.end()) FreeLeaseResources(TakeLease(it));
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
  queue_.RemoveIf([&](const LeaseRequest& r) { return r.job == job; },
                  [&](const LeaseRequest& r) {
                    options_.clients->Refuse(r.client, r.request_id, message);
                    Untrack(r.client);
                  });
  if (entry != nullptr) entry->failed_starts = 0;
}

bool LocalLeaseManager::IsDetached(const Worker& w) const {
  if (w.state != WorkerState::kLeased) return false;
  auto it = leases_.find(w.lease_id);
  return it != leases_.end() && it->second.detached;
}

absl::Status LocalLeaseManager::PrepareBundles(
    const std::string& group, const std::vector<std::pair<int, ResourceSet>>& bundles,
    bool commit) {
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
    return status;
  }
  if (!commit) return status;
  // Refused, nothing stays reserved (above); accepted, all of them commit.
  std::vector<int> indices;
  for (const auto& [index, need] : bundles) indices.push_back(index);
  return CommitBundles(group, indices);
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
    Lease lease = TakeLease(leases_.find(lease_id));
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
  queue_.RemoveIf([&](const LeaseRequest& r) { return r.group == group; },
                  [&](const LeaseRequest& r) {
                    if (removed) {
                      options_.clients->Refuse(r.client, r.request_id,
                                               "its placement group was removed");
                    } else {
                      // Rolled back here (it may be placed again elsewhere): ask again.
                      options_.clients->Retry(r.client, r.request_id);
                    }
                    Untrack(r.client);
                  });
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

void FillDemand(const std::vector<LocalLeaseManager::Demand>& demand,
                capnp::List<proto::Demand>::Builder out) {
  for (size_t i = 0; i < demand.size(); ++i) {
    out[i].setName(demand[i].name);
    out[i].setCount(demand[i].count);
    SetResources(out[i].initResources(demand[i].resources.size()), demand[i].resources);
  }
}

std::vector<LocalLeaseManager::Demand> LocalLeaseManager::PendingDemand() const {
  std::map<std::pair<std::string, std::string>, Demand> demand;
  queue_.ForEachClass([&](const LeaseRequest& front, size_t size) {
    Demand& d = demand[{front.name, ResourceShapeKey(front.placement_map)}];
    d.name = front.name;
    d.count += static_cast<uint32_t>(size);
    d.resources = front.placement_map;
  });
  std::vector<Demand> out;
  for (auto& [key, d] : demand) out.push_back(std::move(d));
  return out;
}

}  // namespace lumen::node
