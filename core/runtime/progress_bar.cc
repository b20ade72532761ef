#include "core/runtime/progress_bar.h"

#include <unistd.h>

#include <algorithm>

#include "absl/strings/str_format.h"

namespace lumen::internal {

namespace {
constexpr size_t kLineWidth = 78;
}  // namespace

std::string ProgressBar::Render(size_t ready, double seconds) const {
  ready = std::min(ready, total_);
  int filled = total_ == 0 ? kWidth : static_cast<int>(ready * kWidth / total_);
  std::string bar(static_cast<size_t>(filled), '#');
  bar.resize(kWidth, ' ');
  std::string line = absl::StrFormat("Get: [%s] %d/%d objects ready, %.1f s", bar, ready, total_,
                                     seconds);
  if (line.size() < kLineWidth) line.resize(kLineWidth, ' ');
  return "\r" + line;
}

std::string ProgressBar::Clear() const { return "\r" + std::string(kLineWidth, ' ') + "\r"; }

bool ProgressBar::OnTerminal() {
  return ::isatty(STDOUT_FILENO) == 1 && ::isatty(STDERR_FILENO) == 1;
}

}  // namespace lumen::internal
