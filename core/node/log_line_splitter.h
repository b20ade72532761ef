// LogLineSplitter: cuts a byte stream (a worker's stdout or stderr, read from
// its pipe in chunks of any size) into lines. A line split across reads is
// held until its newline comes; a line longer than `max_line_bytes` is given
// out in pieces of that size, so a worker that writes megabytes without a
// newline costs at most `max_line_bytes` of memory here.
//
//   LogLineSplitter splitter(16384);
//   splitter.Feed(chunk, [](std::string_view text, bool complete) { ... });
//   splitter.Finish(emit);  // at end of stream: the unterminated rest
//
// `complete` is true for a line that ended with its newline (the newline and
// a '\r' before it are not part of `text`), false for a piece of a long line
// or the rest given by Finish. Not thread-safe (one owner).
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

namespace lumen::node {

class LogLineSplitter {
 public:
  // Called for each line or piece; `text` is valid only during the call.
  using Emit = std::function<void(std::string_view text, bool complete)>;

  static constexpr size_t kDefaultMaxLineBytes = 16384;

  explicit LogLineSplitter(size_t max_line_bytes = kDefaultMaxLineBytes);

  // Appends `data` to the stream and emits what it completes.
  void Feed(std::string_view data, const Emit& emit);
  // End of stream: emits the bytes after the last newline, if any.
  void Finish(const Emit& emit);
  // Bytes held back (a line without its newline yet); at most max_line_bytes.
  size_t pending_bytes() const { return partial_.size(); }

 private:
  void EmitLine(std::string_view text, bool complete, const Emit& emit);

  const size_t max_line_bytes_;
  std::string partial_;  // the start of the current line
};

}  // namespace lumen::node
