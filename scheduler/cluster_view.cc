#include "lumen/scheduler/cluster_view.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <set>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace lumen::scheduler {
namespace {

// Debian's Abseil is built with its own absl::string_view rather than an alias
// of std::string_view; this bridges the two either way.
absl::string_view AbslView(std::string_view s) { return absl::string_view(s.data(), s.size()); }

// Node attempts one bundle search may make before giving up.
constexpr int64_t kSearchBudget = 200000;

// The resource names utilisation is computed over: those in `sets` plus CPU.
std::vector<std::string> UtilisationNames(const std::vector<ResourceSet>& sets) {
  std::set<std::string> names = {std::string(kCPU)};
  for (const ResourceSet& set : sets) {
    for (const auto& [name, quantity] : set.ToMap()) names.insert(name);
  }
  return {names.begin(), names.end()};
}

// The highest fraction in use over `names`, counting only the resources the
// node has; 0 when it has none of them.
double Utilisation(const ResourceSet& total, const ResourceSet& available,
                   const std::vector<std::string>& names) {
  double max_used = 0;
  for (const std::string& name : names) {
    const double t = total.Get(name);
    if (t <= 0) continue;
    const double free = std::min(available.Get(name), t);
    max_used = std::max(max_used, (t - free) / t);
  }
  return max_used;
}

// An alive node that could take a PickNode request.
struct Candidate {
  const std::string* id;
  double utilisation;
  bool fits_now;
  const NodeResources* node;
};

// The candidate with the lowest (or, with `highest`, the highest)
// utilisation, considering only those that fit now when `only_now`. Ties go
// to `local`, then to the first in `candidates` (node id order). nullptr when
// none qualifies.
const Candidate* Best(const std::vector<Candidate>& candidates, bool only_now, bool highest,
                      const std::string& local) {
  const Candidate* best = nullptr;
  for (const Candidate& c : candidates) {
    if (only_now && !c.fits_now) continue;
    if (best == nullptr) {
      best = &c;
      continue;
    }
    bool better = highest ? c.utilisation > best->utilisation
                          : c.utilisation < best->utilisation;
    if (!better && c.utilisation == best->utilisation && *c.id == local && *best->id != local) {
      better = true;
    }
    if (better) best = &c;
  }
  return best;
}

// Where a request waits when no candidate fits now: the local node if it is a
// candidate, else the least used one. `candidates` is not empty.
Placement WaitOn(const std::vector<Candidate>& candidates, const std::string& local) {
  for (const Candidate& c : candidates) {
    if (*c.id == local) return Placement{*c.id, false};
  }
  return Placement{*Best(candidates, /*only_now=*/false, /*highest=*/false, local)->id, false};
}

// Makes `feasible` kDefault's candidates, in place and in order: each
// utilisation raised to the node's store fraction, without the nodes whose
// store is nearly full unless all of them are.
void WithStores(std::vector<Candidate>& feasible) {
  const bool any_room = std::any_of(feasible.begin(), feasible.end(), [](const Candidate& c) {
    return !c.node->StoreNearlyFull();
  });
  if (any_room) {
    std::erase_if(feasible, [](const Candidate& c) { return c.node->StoreNearlyFull(); });
  }
  for (Candidate& c : feasible) c.utilisation = std::max(c.utilisation, c.node->StoreFraction());
}

// ---- Placement groups ----

// An alive node during a bundle placement: `room` is what is left of its
// available (or total) resources after the bundles placed on it so far.
struct Slot {
  const std::string* id;
  const ResourceSet* total;
  ResourceSet room;
  int bundles = 0;
};

// Node index per bundle, in the order of the bundles.
using Assignment = std::vector<size_t>;

struct Attempt {
  std::optional<Assignment> assignment;
  // The search ran out of budget: failure is not a proof of impossibility.
  bool gave_up = false;
};

double SlotUtilisation(const Slot& slot, const std::vector<std::string>& names) {
  return Utilisation(*slot.total, slot.room, names);
}

// The slot with the most free room (lowest utilisation; ties in node id
// order) among those whose room fits `request`.
std::optional<size_t> MostRoom(const std::vector<Slot>& slots, const ResourceSet& request,
                               const std::vector<std::string>& names) {
  std::optional<size_t> best;
  double best_utilisation = 0;
  for (size_t i = 0; i < slots.size(); ++i) {
    if (!request.IsSubsetOf(slots[i].room)) continue;
    const double u = SlotUtilisation(slots[i], names);
    if (!best || u < best_utilisation) {
      best = i;
      best_utilisation = u;
    }
  }
  return best;
}

ResourceSet Sum(const std::vector<ResourceSet>& bundles) {
  ResourceSet sum;
  for (const ResourceSet& b : bundles) sum += b;
  return sum;
}

std::optional<Assignment> StrictPack(const std::vector<ResourceSet>& bundles,
                                     const std::vector<Slot>& slots,
                                     const std::vector<std::string>& names) {
  std::optional<size_t> node = MostRoom(slots, Sum(bundles), names);
  if (!node) return std::nullopt;
  return Assignment(bundles.size(), *node);
}

// Bundles in order onto the current node while they fit, then onto the node
// with the most free room that fits the next one.
std::optional<Assignment> GreedyPack(const std::vector<ResourceSet>& bundles,
                                     std::vector<Slot> slots,
                                     const std::vector<std::string>& names) {
  Assignment out(bundles.size());
  std::optional<size_t> current;
  for (size_t k = 0; k < bundles.size(); ++k) {
    if (!current || !bundles[k].IsSubsetOf(slots[*current].room)) {
      current = MostRoom(slots, bundles[k], names);
      if (!current) return std::nullopt;
    }
    slots[*current].room -= bundles[k];
    out[k] = *current;
  }
  return out;
}

// Which nodes a search tries first for a bundle.
enum class Preference {
  kEmptiest,        // most free room first
  kFullest,         // least free room first
  kFewestBundles,   // fewest of this group's bundles, then most free room
};

// Depth-first search for an assignment of every bundle, largest bundles
// first, optionally each on a distinct node. Nodes in the same state (same
// total, room and bundle count) are interchangeable, so only one of them is
// tried per step.
class BundleSearch {
 public:
  BundleSearch(const std::vector<ResourceSet>& bundles, std::vector<Slot> slots,
               const std::vector<std::string>& names, bool distinct, Preference preference)
      : bundles_(bundles),
        slots_(std::move(slots)),
        names_(names),
        distinct_(distinct),
        preference_(preference),
        assignment_(bundles.size()) {
    // Size of a bundle: the sum of its quantities as fractions of the largest
    // node's quantity of each resource.
    std::vector<double> size(bundles.size(), 0);
    for (size_t k = 0; k < bundles.size(); ++k) {
      for (const auto& [name, quantity] : bundles[k].ToMap()) {
        double largest = 0;
        for (const Slot& slot : slots_) largest = std::max(largest, slot.total->Get(name));
        size[k] += largest > 0 ? quantity / largest : quantity;
      }
    }
    order_.resize(bundles.size());
    for (size_t k = 0; k < order_.size(); ++k) order_[k] = k;
    std::stable_sort(order_.begin(), order_.end(),
                     [&](size_t a, size_t b) { return size[a] > size[b]; });
  }

  Attempt Run() {
    if (Place(0)) return {assignment_, false};
    return {std::nullopt, gave_up_};
  }

 private:
  bool Place(size_t depth) {
    if (depth == order_.size()) return true;
    const size_t k = order_[depth];
    const ResourceSet& bundle = bundles_[k];

    struct Option {
      size_t slot;
      double utilisation;
    };
    std::vector<Option> options;
    for (size_t i = 0; i < slots_.size(); ++i) {
      if (distinct_ && slots_[i].bundles > 0) continue;
      if (!bundle.IsSubsetOf(slots_[i].room)) continue;
      options.push_back({i, SlotUtilisation(slots_[i], names_)});
    }
    std::stable_sort(options.begin(), options.end(), [&](const Option& a, const Option& b) {
      switch (preference_) {
        case Preference::kEmptiest:
          return a.utilisation < b.utilisation;
        case Preference::kFullest:
          return a.utilisation > b.utilisation;
        case Preference::kFewestBundles:
          if (slots_[a.slot].bundles != slots_[b.slot].bundles) {
            return slots_[a.slot].bundles < slots_[b.slot].bundles;
          }
          return a.utilisation < b.utilisation;
      }
      return false;
    });

    std::vector<size_t> tried;
    for (const Option& option : options) {
      Slot& slot = slots_[option.slot];
      const bool same_as_tried = std::any_of(tried.begin(), tried.end(), [&](size_t t) {
        const Slot& other = slots_[t];
        return other.bundles == slot.bundles && other.room == slot.room &&
               *other.total == *slot.total;
      });
      if (same_as_tried) continue;
      if (--budget_ < 0) {
        gave_up_ = true;
        return false;
      }
      tried.push_back(option.slot);
      slot.room -= bundle;
      ++slot.bundles;
      assignment_[k] = option.slot;
      if (Place(depth + 1)) return true;
      slot.room += bundle;
      --slot.bundles;
      if (gave_up_) return false;
    }
    return false;
  }

  const std::vector<ResourceSet>& bundles_;
  std::vector<Slot> slots_;
  const std::vector<std::string>& names_;
  const bool distinct_;
  const Preference preference_;
  std::vector<size_t> order_;  // bundle indices, largest first
  Assignment assignment_;
  int64_t budget_ = kSearchBudget;
  bool gave_up_ = false;
};

// One placement attempt of `bundles` against `slots` (their rooms set to the
// nodes' available or total resources).
Attempt Solve(const std::vector<ResourceSet>& bundles, const std::vector<Slot>& slots,
              PlacementStrategy strategy, const std::vector<std::string>& names) {
  switch (strategy) {
    case PlacementStrategy::kStrictPack:
      return {StrictPack(bundles, slots, names), false};
    case PlacementStrategy::kPack: {
      if (auto packed = StrictPack(bundles, slots, names)) return {std::move(packed), false};
      if (auto greedy = GreedyPack(bundles, slots, names)) return {std::move(greedy), false};
      return BundleSearch(bundles, slots, names, /*distinct=*/false, Preference::kFullest).Run();
    }
    case PlacementStrategy::kStrictSpread:
      return BundleSearch(bundles, slots, names, /*distinct=*/true, Preference::kEmptiest).Run();
    case PlacementStrategy::kSpread: {
      Attempt spread =
          BundleSearch(bundles, slots, names, /*distinct=*/true, Preference::kEmptiest).Run();
      if (spread.assignment) return spread;
      return BundleSearch(bundles, slots, names, /*distinct=*/false, Preference::kFewestBundles)
          .Run();
    }
  }
  return {};
}

std::string BundlesString(const std::vector<ResourceSet>& bundles) {
  return absl::StrCat(
      "[",
      absl::StrJoin(bundles, ", ",
                    [](std::string* out, const ResourceSet& b) { out->append(b.ToString()); }),
      "]");
}

}  // namespace

std::string_view PlacementStrategyName(PlacementStrategy strategy) {
  switch (strategy) {
    case PlacementStrategy::kPack:
      return "PACK";
    case PlacementStrategy::kSpread:
      return "SPREAD";
    case PlacementStrategy::kStrictPack:
      return "STRICT_PACK";
    case PlacementStrategy::kStrictSpread:
      return "STRICT_SPREAD";
  }
  return "UNKNOWN";
}

double NodeResources::StoreFraction() const {
  if (store_capacity == 0) return 0;
  if (store_used >= store_capacity) return 1;
  return static_cast<double>(store_used) / static_cast<double>(store_capacity);
}

void ClusterResourceView::Upsert(const std::string& node_id, NodeResources resources) {
  nodes_[node_id] = std::move(resources);
}

void ClusterResourceView::Remove(const std::string& node_id) { nodes_.erase(node_id); }

void ClusterResourceView::MarkDead(const std::string& node_id) {
  auto it = nodes_.find(node_id);
  if (it != nodes_.end()) it->second.alive = false;
}

const NodeResources* ClusterResourceView::Find(const std::string& node_id) const {
  auto it = nodes_.find(node_id);
  return it == nodes_.end() ? nullptr : &it->second;
}

void ClusterResourceView::Subtract(const std::string& node_id, const ResourceSet& request) {
  auto it = nodes_.find(node_id);
  if (it == nodes_.end()) return;
  adjusted_.insert(node_id);
  ResourceSet& available = it->second.available;
  if (request.IsSubsetOf(available)) {
    available -= request;  // exact
    return;
  }
  // The view has less than requested (it is only an estimate): take what is
  // there, never going below zero.
  ResourceSet take;
  for (const auto& [name, quantity] : request.ToMap()) {
    take.Set(name, std::min(quantity, available.Get(name)));
  }
  if (take.IsSubsetOf(available)) {
    available -= take;
  } else {
    for (const auto& [name, quantity] : request.ToMap()) available.Set(name, 0);
  }
}

std::vector<std::string> ClusterResourceView::TakeAdjusted() {
  std::vector<std::string> out(adjusted_.begin(), adjusted_.end());
  adjusted_.clear();
  return out;
}

void ClusterResourceView::Add(const std::string& node_id, const ResourceSet& request) {
  auto it = nodes_.find(node_id);
  if (it == nodes_.end()) return;
  adjusted_.insert(node_id);
  NodeResources& node = it->second;
  node.available += request;
  if (node.available.IsSubsetOf(node.total)) return;
  for (const auto& [name, quantity] : request.ToMap()) {
    if (node.available.Get(name) > node.total.Get(name)) {
      node.available.Set(name, node.total.Get(name));
    }
  }
}

bool ClusterResourceView::IsFeasibleAnywhere(const ResourceSet& request) const {
  return std::any_of(nodes_.begin(), nodes_.end(), [&](const auto& entry) {
    return entry.second.alive && request.IsSubsetOf(entry.second.total);
  });
}

absl::StatusOr<Placement> ClusterResourceView::PickNode(const ResourceSet& request,
                                                        const SchedulingStrategy& strategy,
                                                        const std::string& local_node_id,
                                                        double spread_threshold) {
  if (strategy.kind == StrategyKind::kNodeAffinity) {
    std::string problem;
    const NodeResources* node = Find(strategy.node_id);
    if (node == nullptr) {
      problem = "is unknown";
    } else if (!node->alive) {
      problem = "is dead";
    } else if (!request.IsSubsetOf(node->total)) {
      problem = absl::StrCat("is too small (total ", node->total.ToString(), ")");
    } else {
      return Placement{strategy.node_id, request.IsSubsetOf(node->available)};
    }
    if (!strategy.soft) {
      return absl::FailedPreconditionError(
          absl::StrFormat("cannot place %s by hard node affinity: node %s %s",
                          request.ToString(), absl::BytesToHexString(strategy.node_id), problem));
    }
    // Soft: fall back to the default policy below.
  }

  const std::vector<std::string> names = UtilisationNames({request});
  std::vector<Candidate> feasible;  // node id order
  int alive = 0;
  for (const auto& [id, node] : nodes_) {
    if (!node.alive) continue;
    ++alive;
    if (!request.IsSubsetOf(node.total)) continue;
    feasible.push_back({&id, Utilisation(node.total, node.available, names),
                        request.IsSubsetOf(node.available), &node});
  }
  if (feasible.empty()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s is infeasible: no alive node can ever fit it (%d of %d known nodes alive)",
        request.ToString(), alive, nodes_.size()));
  }
  const bool any_fits_now = std::any_of(feasible.begin(), feasible.end(),
                                        [](const Candidate& c) { return c.fits_now; });

  if (strategy.kind == StrategyKind::kSpread) {
    const Candidate* pick = nullptr;
    for (const Candidate& c : feasible) {
      if (any_fits_now && !c.fits_now) continue;
      if (pick == nullptr) pick = &c;  // wrap-around choice
      if (!last_spread_node_ || *c.id > *last_spread_node_) {
        pick = &c;
        break;
      }
    }
    last_spread_node_ = *pick->id;
    return Placement{*pick->id, pick->fits_now};
  }

  if (strategy.kind == StrategyKind::kPack) {
    if (const Candidate* best = Best(feasible, /*only_now=*/true, /*highest=*/true, local_node_id)) {
      return Placement{*best->id, true};
    }
    return WaitOn(feasible, local_node_id);
  }

  // kDefault, or a soft node affinity falling back.
  WithStores(feasible);
  const std::vector<Candidate>& candidates = feasible;
  for (const Candidate& c : candidates) {
    if (*c.id == local_node_id && c.fits_now && c.utilisation < spread_threshold) {
      return Placement{*c.id, true};
    }
  }
  if (const Candidate* best =
          Best(candidates, /*only_now=*/true, /*highest=*/false, local_node_id)) {
    return Placement{*best->id, true};
  }
  // Nothing fits now: wait on the local node if it could ever run it, else on
  // the least used feasible node.
  return WaitOn(candidates, local_node_id);
}

absl::StatusOr<std::vector<std::string>> ClusterResourceView::PlaceBundles(
    const std::vector<ResourceSet>& bundles, PlacementStrategy strategy) const {
  if (bundles.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        AbslView(PlacementStrategyName(strategy)), " placement group has no bundles"));
  }
  const std::string what =
      absl::StrFormat("%s placement group of %d bundles %s",
                      AbslView(PlacementStrategyName(strategy)), bundles.size(),
                      BundlesString(bundles));
  auto never = [&](std::string_view why) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, " can never be placed: ", AbslView(why)));
  };

  // Alive nodes in node id order, with room = total for now.
  std::vector<Slot> slots;
  for (const auto& [id, node] : nodes_) {
    if (node.alive) slots.push_back({&id, &node.total, node.total});
  }
  if (slots.empty()) return never("there are no alive nodes");
  for (size_t k = 0; k < bundles.size(); ++k) {
    const bool fits_somewhere = std::any_of(slots.begin(), slots.end(), [&](const Slot& s) {
      return bundles[k].IsSubsetOf(*s.total);
    });
    if (!fits_somewhere) {
      return never(absl::StrFormat("bundle %d %s is bigger than every alive node", k,
                                   bundles[k].ToString()));
    }
  }
  if (strategy == PlacementStrategy::kStrictSpread && bundles.size() > slots.size()) {
    return never(absl::StrFormat("%d bundles need distinct nodes but only %d nodes are alive",
                                 bundles.size(), slots.size()));
  }
  if (strategy == PlacementStrategy::kStrictPack) {
    const ResourceSet sum = Sum(bundles);
    const bool fits_somewhere = std::any_of(
        slots.begin(), slots.end(), [&](const Slot& s) { return sum.IsSubsetOf(*s.total); });
    if (!fits_somewhere) {
      return never(absl::StrCat("their sum ", sum.ToString(), " is bigger than every alive node"));
    }
  }

  const std::vector<std::string> names = UtilisationNames(bundles);

  std::vector<Slot> now = slots;
  for (Slot& slot : now) slot.room = nodes_.at(*slot.id).available;
  Attempt attempt = Solve(bundles, now, strategy, names);
  if (attempt.assignment) {
    std::vector<std::string> ids;
    ids.reserve(bundles.size());
    for (size_t i : *attempt.assignment) ids.push_back(*slots[i].id);
    return ids;
  }

  Attempt ever = Solve(bundles, slots, strategy, names);
  if (ever.assignment) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "%s cannot be placed now: the %d alive nodes lack the available resources (it fits "
        "their totals; retry when resources free up)",
        what, slots.size()));
  }
  if (ever.gave_up) {
    return absl::ResourceExhaustedError(absl::StrCat(
        what, " was not placed: the search for a placement gave up before finding one"));
  }
  return never(absl::StrFormat("the %d alive nodes' totals cannot hold it", slots.size()));
}

}  // namespace lumen::scheduler
