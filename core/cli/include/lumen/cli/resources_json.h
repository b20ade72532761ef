// Parsing the `--resources` flag of `lumen start`: a flat JSON object of
// numbers, e.g. '{"ssd": 1, "accel": 0.5}', read with Boost.JSON.
//
//   absl::StatusOr<std::map<std::string, double>> r = lumen::cli::ParseResourcesJson(text);
//   if (!r.ok()) ...  // r.status().message(): what is wrong and where
//
// Stateless: safe to call from any thread.
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace lumen::cli {

// The resources named in `text` with their quantities. InvalidArgument naming
// the problem ("not valid JSON at byte 7: ...", "resource \"ssd\" needs a
// number", ...) when `text` is not a flat JSON object whose values are all
// numbers.
[[nodiscard]] absl::StatusOr<std::map<std::string, double>> ParseResourcesJson(
    std::string_view text);

}  // namespace lumen::cli
