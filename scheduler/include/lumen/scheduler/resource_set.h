// Resource quantities and a node's resource accounting.
//
// Provides `ResourceSet`, a map from resource name (CPU, GPU, memory,
// object_store_memory or any custom name) to a non-negative quantity stored
// exactly in fixed point (units of 1e-4), and `LocalResourceManager`, which
// tracks what one node has in total and what is still free.
//
//   ASSIGN_OR_RETURN(lumen::scheduler::ResourceSet total,
//                    lumen::scheduler::ResourceSet::FromMap(
//                        {{"CPU", 8}, {"GPU", 1}, {"memory", 16.0 * (1 << 30)}}));
//   lumen::scheduler::LocalResourceManager node(total);
//   ASSIGN_OR_RETURN(lumen::scheduler::ResourceSet request,
//                    lumen::scheduler::ResourceSet::FromMap({{"CPU", 1}, {"GPU", 0.5}}));
//   if (node.TryAcquire(request)) {
//     // ... run the task ...
//     node.Release(request);
//   }
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"

namespace lumen::scheduler {

// Well-known resource names.
inline constexpr std::string_view kCPU = "CPU";
inline constexpr std::string_view kGPU = "GPU";
// Bytes of worker heap memory.
inline constexpr std::string_view kMemory = "memory";
// Bytes of the node's shared-memory object store.
inline constexpr std::string_view kObjectStoreMemory = "object_store_memory";

// A set of named, non-negative resource quantities, such as a node's capacity
// or a task's request. Quantities are stored as int64 counts of 1e-4 (one
// "unit"), so fractional amounts (0.5 GPU, 0.0001 CPU) add and subtract
// exactly. The largest accepted quantity is kMaxQuantity (9e14, enough for
// ~818 TiB of memory in bytes). A name with quantity zero is absent: it is not
// stored, not listed by ToMap, and Get returns 0 for it.
//
// Value type; not thread-safe (copy it, or guard it externally).
class ResourceSet {
 public:
  // Number of units per 1.0 of a resource.
  static constexpr int64_t kUnitsPerOne = 10000;
  // The largest quantity FromMap accepts.
  static constexpr double kMaxQuantity = 9e14;

  ResourceSet() = default;

  // Builds a set from name -> quantity. Fails with InvalidArgument when a name
  // is empty, or a quantity is negative, NaN, infinite, above kMaxQuantity or
  // not a multiple of 1e-4. A quantity q counts as a multiple of 1e-4 when
  // q * 1e4 lies within 1e-6 + 4 * DBL_EPSILON * q * 1e4 of an integer, i.e.
  // within the error binary floating point explains (0.1 + 0.2 is accepted as
  // 0.3, 0.00015 and 1.23456 are rejected); it is then rounded to that
  // integer. Whole quantities are exact up to kMaxQuantity. Zero quantities are
  // dropped.
  static absl::StatusOr<ResourceSet> FromMap(const std::map<std::string, double>& quantities);

  // Name -> quantity for every non-zero resource.
  std::map<std::string, double> ToMap() const;

  // The quantity of `name`; 0 when absent.
  double Get(std::string_view name) const;

  // Sets `name` to `quantity`, rounded to the nearest 1e-4; 0 removes it. An
  // invalid name or quantity (empty name, negative, NaN, infinite, above
  // kMaxQuantity) is a programmer error: it asserts in debug builds and is
  // ignored (negative/NaN remove the entry, too large saturates) in release.
  // Use FromMap to validate untrusted input.
  void Set(std::string_view name, double quantity);

  // True when no resource has a non-zero quantity.
  bool IsEmpty() const { return units_.empty(); }

  // True when every quantity in this set is <= the same quantity in
  // `available` (an absent resource counts as 0).
  bool IsSubsetOf(const ResourceSet& available) const;

  // Adds `other` quantity by quantity (saturating at the int64 limit).
  ResourceSet& operator+=(const ResourceSet& other);
  // Subtracts `other`. Taking more than is present is a programmer error: it
  // asserts in debug builds and clamps the quantity at 0 in release builds.
  ResourceSet& operator-=(const ResourceSet& other);

  friend ResourceSet operator+(ResourceSet a, const ResourceSet& b) { return a += b; }
  friend ResourceSet operator-(ResourceSet a, const ResourceSet& b) { return a -= b; }
  friend bool operator==(const ResourceSet& a, const ResourceSet& b) {
    return a.units_ == b.units_;
  }

  // Human-readable form, e.g.
  //   {CPU: 2, memory: 4.0 GiB, object_store_memory: 1.5 GiB, GPU: 0.5}
  // CPU, memory, object_store_memory and GPU come first in that order, then
  // custom names in lexicographic order. Names that denote bytes (`memory`,
  // `object_store_memory` and any name ending in `_memory`) are shown with a
  // binary unit (B, KiB, MiB, GiB, TiB); others exactly, trailing zeros
  // dropped.
  std::string ToString() const;

 private:
  friend class LocalResourceManager;

  // Units of `name`; 0 when absent.
  int64_t GetUnits(std::string_view name) const;
  // Sets `name` to `units`; <= 0 erases it.
  void SetUnits(std::string_view name, int64_t units);

  // name -> units (always > 0).
  absl::flat_hash_map<std::string, int64_t> units_;
};

// The resources of one node: its total capacity and what is free now.
// `available` is always a subset of `total`.
//
// Not thread-safe: owned and used by the node daemon's event loop.
class LocalResourceManager {
 public:
  explicit LocalResourceManager(ResourceSet total);

  const ResourceSet& total() const { return total_; }
  const ResourceSet& available() const { return available_; }

  // True when `request` could ever run here (it fits in the total).
  bool IsFeasible(const ResourceSet& request) const;

  // Takes `request` from the available resources if all of it is free and
  // returns true; otherwise changes nothing and returns false.
  bool TryAcquire(const ResourceSet& request);

  // Gives `request` back. Available quantities never exceed the total: any
  // excess (a double release, or a resource this node lacks) is dropped.
  void Release(const ResourceSet& request);

  // The highest fraction in use over all resources, in [0, 1]; 0 when the
  // node has no resources.
  double Utilization() const;

 private:
  ResourceSet total_;
  ResourceSet available_;
};

}  // namespace lumen::scheduler
