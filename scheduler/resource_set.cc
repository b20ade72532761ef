#include "lumen/scheduler/resource_set.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdlib>
#include <iterator>
#include <limits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace lumen::scheduler {
namespace {

constexpr int64_t kMaxUnits = std::numeric_limits<int64_t>::max();

// Debian's Abseil is built with its own absl::string_view rather than an alias
// of std::string_view; this bridges the two either way.
absl::string_view AbslView(std::string_view s) { return absl::string_view(s.data(), s.size()); }

// Why `quantity` is not a valid resource quantity, or "" when it is.
std::string QuantityProblem(double quantity) {
  if (std::isnan(quantity)) return "is NaN";
  if (std::isinf(quantity)) return "is infinite";
  if (quantity < 0) return "is negative";
  if (quantity > ResourceSet::kMaxQuantity) {
    return absl::StrFormat("exceeds the maximum of %g", ResourceSet::kMaxQuantity);
  }
  return "";
}

// Rounds a valid quantity (see QuantityProblem) to the nearest unit. The whole
// part is converted separately so that whole quantities above 2^53 / 1e4 (large
// byte counts) stay exact. Sets *off_grid when the quantity is not a multiple
// of 1e-4 beyond what the double's own precision explains: |q * 1e4 - units|
// must be <= 1e-6 + 4 * DBL_EPSILON * q * 1e4.
int64_t ToUnits(double quantity, bool* off_grid = nullptr) {
  constexpr double kPerOne = static_cast<double>(ResourceSet::kUnitsPerOne);
  const double whole = std::floor(quantity);
  const double frac_scaled = (quantity - whole) * kPerOne;  // quantity - whole is exact.
  const double frac_rounded = std::round(frac_scaled);
  if (off_grid != nullptr) {
    const double tolerance =
        1e-6 + 4 * std::numeric_limits<double>::epsilon() * quantity * kPerOne;
    *off_grid = std::fabs(frac_scaled - frac_rounded) > tolerance;
  }
  return static_cast<int64_t>(whole) * ResourceSet::kUnitsPerOne +
         static_cast<int64_t>(frac_rounded);
}

// units / 1e4 as the double nearest to the exact value: a single division is
// correctly rounded while units is exact in a double (< 2^53); above that the
// whole part is split off so that whole quantities (bytes) stay exact.
double UnitsToDouble(int64_t units) {
  constexpr int64_t kExactLimit = int64_t{1} << 53;
  if (units < kExactLimit) {
    return static_cast<double>(units) / static_cast<double>(ResourceSet::kUnitsPerOne);
  }
  return static_cast<double>(units / ResourceSet::kUnitsPerOne) +
         static_cast<double>(units % ResourceSet::kUnitsPerOne) /
             static_cast<double>(ResourceSet::kUnitsPerOne);
}

bool IsBytesName(std::string_view name) {
  return name == kMemory || name == kObjectStoreMemory || absl::EndsWith(AbslView(name), "_memory");
}

// Exact decimal form of `units` / 1e4, without trailing zeros: "2", "0.5".
std::string FormatUnits(int64_t units) {
  std::string out = absl::StrCat(units / ResourceSet::kUnitsPerOne);
  int64_t frac = units % ResourceSet::kUnitsPerOne;
  if (frac != 0) {
    std::string digits = absl::StrFormat("%04d", frac);
    digits.erase(digits.find_last_not_of('0') + 1);
    absl::StrAppend(&out, ".", digits);
  }
  return out;
}

// "512 B", "4.0 GiB", "1.25 GiB".
std::string FormatBytes(double bytes) {
  static constexpr const char* kSuffixes[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int i = 0;
  while (bytes >= 1024 && i + 1 < static_cast<int>(std::size(kSuffixes))) {
    bytes /= 1024;
    ++i;
  }
  if (i == 0 && bytes == std::floor(bytes)) return absl::StrFormat("%.0f B", bytes);
  std::string number = absl::StrFormat("%.2f", bytes);
  // Keep at least one decimal: "4.00" -> "4.0", "1.50" -> "1.5".
  if (number.size() >= 2 && number.back() == '0') number.pop_back();
  return absl::StrCat(number, " ", kSuffixes[i]);
}

// Display rank: CPU, memory, object_store_memory, GPU, then custom names.
int Rank(std::string_view name) {
  if (name == kCPU) return 0;
  if (name == kMemory) return 1;
  if (name == kObjectStoreMemory) return 2;
  if (name == kGPU) return 3;
  return 4;
}

}  // namespace

absl::StatusOr<ResourceSet> ResourceSet::FromMap(
    const std::map<std::string, double>& quantities) {
  ResourceSet result;
  for (const auto& [name, quantity] : quantities) {
    if (name.empty()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("resource with an empty name (quantity %g)", quantity));
    }
    if (std::string problem = QuantityProblem(quantity); !problem.empty()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("resource '%s' quantity %g %s", name, quantity, problem));
    }
    bool off_grid = false;
    const int64_t units = ToUnits(quantity, &off_grid);
    if (off_grid) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "resource '%s' quantity %.10g is not a multiple of 0.0001", name, quantity));
    }
    result.SetUnits(name, units);
  }
  return result;
}

std::map<std::string, double> ResourceSet::ToMap() const {
  std::map<std::string, double> out;
  for (const auto& [name, units] : units_) {
    out[name] = UnitsToDouble(units);
  }
  return out;
}

double ResourceSet::Get(std::string_view name) const {
  return UnitsToDouble(GetUnits(name));
}

void ResourceSet::Set(std::string_view name, double quantity) {
  assert(!name.empty() && "resource name must not be empty");
  assert(QuantityProblem(quantity).empty() && "invalid resource quantity");
  if (name.empty()) return;
  if (std::isnan(quantity) || quantity <= 0) {
    SetUnits(name, 0);
  } else if (quantity > kMaxQuantity) {
    SetUnits(name, ToUnits(kMaxQuantity));
  } else {
    SetUnits(name, ToUnits(quantity));
  }
}

bool ResourceSet::IsSubsetOf(const ResourceSet& available) const {
  for (const auto& [name, units] : units_) {
    if (units > available.GetUnits(name)) return false;
  }
  return true;
}

ResourceSet& ResourceSet::operator+=(const ResourceSet& other) {
  for (const auto& [name, units] : other.units_) {
    int64_t& mine = units_[name];
    mine = mine > kMaxUnits - units ? kMaxUnits : mine + units;
  }
  return *this;
}

ResourceSet& ResourceSet::operator-=(const ResourceSet& other) {
  for (const auto& [name, units] : other.units_) {
    const int64_t mine = GetUnits(name);
    assert(units <= mine && "ResourceSet subtraction would go negative");
    SetUnits(name, mine - std::min(units, mine));
  }
  return *this;
}

std::string ResourceSet::ToString() const {
  std::vector<std::pair<std::string_view, int64_t>> entries(units_.begin(), units_.end());
  std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) {
    const int ra = Rank(a.first), rb = Rank(b.first);
    return ra != rb ? ra < rb : a.first < b.first;
  });
  std::vector<std::string> parts;
  parts.reserve(entries.size());
  for (const auto& [name, units] : entries) {
    parts.push_back(absl::StrCat(
        AbslView(name), ": ",
        IsBytesName(name) ? FormatBytes(UnitsToDouble(units))
                          : FormatUnits(units)));
  }
  return absl::StrCat("{", absl::StrJoin(parts, ", "), "}");
}

int64_t ResourceSet::GetUnits(std::string_view name) const {
  auto it = units_.find(AbslView(name));
  return it == units_.end() ? 0 : it->second;
}

void ResourceSet::SetUnits(std::string_view name, int64_t units) {
  if (units <= 0) {
    units_.erase(AbslView(name));
  } else {
    units_[AbslView(name)] = units;
  }
}

LocalResourceManager::LocalResourceManager(ResourceSet total)
    : total_(std::move(total)), available_(total_) {}

bool LocalResourceManager::IsFeasible(const ResourceSet& request) const {
  return request.IsSubsetOf(total_);
}

bool LocalResourceManager::TryAcquire(const ResourceSet& request) {
  if (!request.IsSubsetOf(available_)) return false;
  available_ -= request;
  return true;
}

void LocalResourceManager::Release(const ResourceSet& request) {
  for (const auto& [name, units] : request.units_) {
    const int64_t total = total_.GetUnits(name);
    const int64_t now = available_.GetUnits(name);
    // now <= total always, so total - now cannot overflow.
    available_.SetUnits(name, now + std::min(units, total - now));
  }
}

double LocalResourceManager::Utilization() const {
  double max_used = 0;
  for (const auto& [name, total] : total_.units_) {
    const int64_t used = total - available_.GetUnits(name);
    max_used = std::max(max_used, static_cast<double>(used) / static_cast<double>(total));
  }
  return max_used;
}

}  // namespace lumen::scheduler
