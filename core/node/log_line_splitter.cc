#include "core/node/log_line_splitter.h"

#include <algorithm>

namespace lumen::node {

LogLineSplitter::LogLineSplitter(size_t max_line_bytes)
    : max_line_bytes_(std::max<size_t>(1, max_line_bytes)) {}

void LogLineSplitter::EmitLine(std::string_view text, bool complete, const Emit& emit) {
  if (complete && !text.empty() && text.back() == '\r') text.remove_suffix(1);
  emit(text, complete);
}

void LogLineSplitter::Feed(std::string_view data, const Emit& emit) {
  while (!data.empty()) {
    size_t newline = data.find('\n');
    size_t take = newline == std::string_view::npos ? data.size() : newline;
    if (partial_.size() + take > max_line_bytes_) {
      // More than max_line_bytes without a newline: give out a full piece.
      // (Exactly max_line_bytes is held: its newline may be in the next read.)
      if (partial_.size() == max_line_bytes_) {
        EmitLine(partial_, false, emit);
        partial_.clear();
        continue;
      }
      size_t room = max_line_bytes_ - partial_.size();
      if (partial_.empty()) {
        EmitLine(data.substr(0, room), false, emit);
      } else {
        partial_.append(data.substr(0, room));
        EmitLine(partial_, false, emit);
        partial_.clear();
      }
      data.remove_prefix(room);
      continue;
    }
    if (newline == std::string_view::npos) {
      partial_.append(data);
      return;
    }
    if (partial_.empty()) {
      EmitLine(data.substr(0, newline), true, emit);
    } else {
      partial_.append(data.substr(0, newline));
      EmitLine(partial_, true, emit);
      partial_.clear();
    }
    data.remove_prefix(newline + 1);
  }
}

void LogLineSplitter::Finish(const Emit& emit) {
  if (partial_.empty()) return;
  std::string rest;
  rest.swap(partial_);
  EmitLine(rest, false, emit);
}

}  // namespace lumen::node
