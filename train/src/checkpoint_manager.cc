#include "checkpoint_manager.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <system_error>

namespace lumen::train::internal {

bool CheckpointManager::Better(const Checkpoint& a, const Checkpoint& b) const {
  const std::string& key = config_.checkpoint_score_attribute;
  if (!key.empty()) {
    auto ia = a.metrics.find(key), ib = b.metrics.find(key);
    const bool ha = ia != a.metrics.end(), hb = ib != b.metrics.end();
    if (ha != hb) return ha;
    if (ha && ia->second != ib->second) {
      return config_.checkpoint_score_order == CheckpointOrder::kMax ? ia->second > ib->second
                                                                      : ia->second < ib->second;
    }
  }
  return a.index > b.index;  // newer first
}

std::vector<Checkpoint> CheckpointManager::Kept() const {
  std::vector<Checkpoint> sorted = kept_;
  std::stable_sort(sorted.begin(), sorted.end(),
                   [&](const Checkpoint& a, const Checkpoint& b) { return Better(a, b); });
  return sorted;
}

std::vector<Checkpoint> CheckpointManager::Add(Checkpoint c) {
  latest_ = c;
  kept_.push_back(std::move(c));
  if (config_.num_to_keep <= 0) return {};
  std::vector<Checkpoint> sorted = Kept();
  std::vector<Checkpoint> keep, drop;
  for (size_t i = 0; i < sorted.size(); ++i) {
    const bool is_latest = sorted[i].index == latest_->index;
    (i < static_cast<size_t>(config_.num_to_keep) || is_latest ? keep : drop).push_back(sorted[i]);
  }
  kept_ = std::move(keep);
  return drop;
}

std::vector<Checkpoint> CheckpointManager::Scan(const std::string& run_dir) {
  namespace fs = std::filesystem;
  std::vector<Checkpoint> found;
  std::error_code ec;
  if (!fs::is_directory(run_dir, ec)) return found;
  for (const auto& entry : fs::directory_iterator(run_dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(".tmp_checkpoint_", 0) == 0) {
      fs::remove_all(entry.path(), ec);  // never renamed: incomplete
      continue;
    }
    const std::string prefix = "checkpoint_";
    if (!entry.is_directory() || name.rfind(prefix, 0) != 0) continue;
    char* end = nullptr;
    long long index = std::strtoll(name.c_str() + prefix.size(), &end, 10);
    if (end == nullptr || *end != '\0') continue;
    found.push_back(Checkpoint{.path = entry.path().string(), .index = index, .metrics = {}});
  }
  std::sort(found.begin(), found.end(),
            [](const Checkpoint& a, const Checkpoint& b) { return a.index < b.index; });
  return found;
}

}  // namespace lumen::train::internal
