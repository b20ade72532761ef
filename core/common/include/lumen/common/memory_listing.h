// The listState request behind `lumen memory`: "memory N" asks a node for its
// store's N largest objects and each local owner for its N largest stored
// objects (doc/objectstore.md, "Seeing memory"). One spelling for the command
// line that asks, the node daemon and the drivers and workers that answer.
//
//   env.setListState(MemoryListing(20));                   // "memory 20"
//   if (auto top = ParseMemoryListing(what)) ListLargest(*top);
//
// Stateless; thread-safe.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace lumen {

// How many objects `lumen memory` lists when it names no number.
inline constexpr size_t kDefaultMemoryTop = 20;

inline std::string MemoryListing(size_t top) { return absl::StrCat("memory ", top); }

// The N of "memory N" ("memory" alone: kDefaultMemoryTop); nullopt for any
// other listing.
inline std::optional<size_t> ParseMemoryListing(std::string_view what) {
  constexpr std::string_view kWord = "memory";
  if (what.substr(0, kWord.size()) != kWord) return std::nullopt;
  what.remove_prefix(kWord.size());
  if (what.empty()) return kDefaultMemoryTop;
  if (what.front() != ' ') return std::nullopt;
  size_t n = 0;
  if (!absl::SimpleAtoi(absl::string_view(what.data() + 1, what.size() - 1), &n)) {
    return kDefaultMemoryTop;
  }
  return n;
}

}  // namespace lumen
