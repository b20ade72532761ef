// ProgressBar: the line a driver draws on its terminal while a Get of many
// refs takes long ("Get: [##########          ] 512/1000 objects ready, 3.2 s").
//
//   ProgressBar bar(1000);
//   if (ProgressBar::OnTerminal()) std::fputs(bar.Render(512, 3.2).c_str(), stderr);
//
// Render is pure; not thread-safe (one per Get, on the calling thread).
// Internal to the API (core/runtime).
#pragma once

#include <cstddef>
#include <string>

namespace lumen::internal {

class ProgressBar {
 public:
  // A Get of this many refs shows a bar once it has waited this long.
  static constexpr size_t kMinRefs = 16;
  static constexpr double kShowAfterSeconds = 1.0;
  static constexpr int kWidth = 30;

  explicit ProgressBar(size_t total) : total_(total) {}

  // "\r" and the bar for `ready` of the total after `seconds`, padded so that
  // it overwrites a longer earlier line.
  std::string Render(size_t ready, double seconds) const;
  // "\r", spaces over the bar, "\r": the terminal line as it was.
  std::string Clear() const;

  // True when this process runs interactively: its stdout is a terminal (the
  // user watches it; a job writing its output to a file or pipe draws
  // nothing) and so is its stderr, where the bar is drawn.
  static bool OnTerminal();

 private:
  size_t total_;
};

}  // namespace lumen::internal
