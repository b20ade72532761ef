#include "worker_group.h"

#include <map>
#include <sstream>

namespace lumen::train::internal {
namespace {

std::string Describe(const std::map<std::string, double>& resources) {
  std::ostringstream out;
  out << "{";
  const char* sep = "";
  for (const auto& [k, v] : resources) {
    out << sep << k << ": " << v;
    sep = ", ";
  }
  out << "}";
  return out.str();
}

const char* StrategyName(PlacementStrategy s) {
  switch (s) {
    case PlacementStrategy::PACK: return "PACK";
    case PlacementStrategy::SPREAD: return "SPREAD";
    case PlacementStrategy::STRICT_PACK: return "STRICT_PACK";
    case PlacementStrategy::STRICT_SPREAD: return "STRICT_SPREAD";
  }
  return "?";
}

}  // namespace

absl::Status WorkerGroup::Reserve(const std::string& name) {
  const auto bundle = scaling_.WorkerResources();
  pg_ = CreatePlacementGroup({.name = name,
                              .bundles = std::vector(scaling_.num_workers, bundle),
                              .strategy = scaling_.placement_strategy});
  if (!pg_.Wait(scaling_.placement_timeout)) {
    std::ostringstream message;
    message << "cannot place " << scaling_.num_workers << " workers of " << Describe(bundle)
            << " each (" << StrategyName(scaling_.placement_strategy) << ") within "
            << scaling_.placement_timeout.count() << " ms: the cluster has "
            << Describe(ClusterResources()) << " in all, " << Describe(AvailableResources())
            << " free";
    Shutdown();
    return absl::ResourceExhaustedError(message.str());
  }
  bundle_nodes_ = pg_.Info().bundle_nodes;
  return absl::OkStatus();
}

void WorkerGroup::Start(const WorkerSetup& base, const std::string& loop_name) {
  const int n = scaling_.num_workers;
  // Node ranks in order of first appearance; local ranks in bundle order per node.
  std::map<std::string, int> node_rank, local_count;
  std::vector<int> local_rank(n);
  for (int i = 0; i < n; ++i) {
    const std::string node = i < static_cast<int>(bundle_nodes_.size()) ? bundle_nodes_[i] : "";
    node_rank.emplace(node, static_cast<int>(node_rank.size()));
    local_rank[i] = local_count[node]++;
  }
  for (int i = 0; i < n; ++i) {
    const std::string node = i < static_cast<int>(bundle_nodes_.size()) ? bundle_nodes_[i] : "";
    WorkerSetup setup = base;
    setup.world_rank = i;
    setup.world_size = n;
    setup.local_rank = local_rank[i];
    setup.local_world_size = local_count[node];
    setup.node_rank = node_rank[node];
    actors_.push_back(lumen::Actor(TrainWorker::Create)
                          .SetResources(scaling_.WorkerResources())
                          .SetPlacementGroup(pg_, i)
                          .Remote(setup));
  }
  for (const auto& actor : actors_) runs_.push_back(actor.Task(&TrainWorker::Run).Remote(loop_name));
}

void WorkerGroup::Shutdown() {
  for (const auto& actor : actors_) {
    try {
      actor.Kill();
    } catch (const Error&) {
      // Already dead: nothing to end.
    }
  }
  actors_.clear();
  runs_.clear();
  if (!pg_.GetID().empty()) {
    try {
      RemovePlacementGroup(pg_.GetID());
    } catch (const Error&) {
      // The head forgot it already (removed, or restarted).
    }
    pg_ = PlacementGroup();
  }
}

}  // namespace lumen::train::internal
