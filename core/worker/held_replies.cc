// HeldReplies and TaskDurations (held_replies.h).
#include "core/worker/held_replies.h"

#include <algorithm>
#include <cstdlib>
#include <utility>

#include "absl/strings/string_view.h"

namespace lumen::runtime {

int HeldReplies::MaxFrames() {
  static const int max = [] {
    const char* v = std::getenv("LUMEN_HOLD_REPLIES");
    return v != nullptr && *v != '\0' ? std::max(0, std::atoi(v)) : 8;
  }();
  return max;
}

int HeldReplies::MaxHoldMicros() {
  static const int micros = [] {
    const char* v = std::getenv("LUMEN_HOLD_REPLIES_MAX_US");
    return v != nullptr && *v != '\0' ? std::max(1, std::atoi(v)) : 500;
  }();
  return micros;
}

bool HeldReplies::For(const std::weak_ptr<Connection>& to) const {
  return count_ > 0 && !to_.owner_before(to) && !to.owner_before(to_);
}

bool HeldReplies::TryHold(const std::weak_ptr<Connection>& to, std::string_view frame,
                          int max_frames) {
  if (count_ > 0 && !For(to)) return false;
  if (count_ >= max_frames || frames_.size() + frame.size() > kMaxBytes) return false;
  Append(to, frame);
  return true;
}

void HeldReplies::Append(const std::weak_ptr<Connection>& to, std::string_view frame) {
  if (count_ == 0) to_ = to;
  frames_.append(frame);
  ++count_;
}

void HeldReplies::Clear() {
  to_.reset();
  count_ = 0;
  frames_.clear();
}

namespace {
// Abseil here has its own string_view, which its string-keyed maps look up by.
absl::string_view Key(std::string_view s) { return absl::string_view(s.data(), s.size()); }
}  // namespace

void TaskDurations::Record(std::string_view function, uint64_t micros) {
  auto [it, inserted] = mean_micros_.try_emplace(Key(function), static_cast<double>(micros));
  if (!inserted) it->second = 0.8 * it->second + 0.2 * static_cast<double>(micros);
}

bool TaskDurations::KnownShort(std::string_view function, double short_micros) const {
  auto it = mean_micros_.find(Key(function));
  return it != mean_micros_.end() && it->second < short_micros;
}

}  // namespace lumen::runtime
