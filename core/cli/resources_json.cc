#include "lumen/cli/resources_json.h"

#include <boost/json.hpp>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace lumen::cli {

absl::StatusOr<std::map<std::string, double>> ParseResourcesJson(std::string_view text) {
  boost::system::error_code ec;
  boost::json::stream_parser parser;
  const size_t used = parser.write(text.data(), text.size(), ec);
  if (!ec) parser.finish(ec);
  if (ec) {
    return absl::InvalidArgumentError(
        absl::StrCat("not valid JSON at byte ", used, ": ", ec.message()));
  }
  const boost::json::value value = parser.release();
  if (!value.is_object()) {
    return absl::InvalidArgumentError(
        "expected a JSON object of resource names to numbers, e.g. {\"ssd\": 1}");
  }
  std::map<std::string, double> out;
  for (const auto& [key, quantity] : value.get_object()) {
    std::string name(key.data(), key.size());
    if (!quantity.is_number()) {
      return absl::InvalidArgumentError(absl::StrCat("resource \"", name, "\" needs a number"));
    }
    out[name] = quantity.to_number<double>();
  }
  return out;
}

}  // namespace lumen::cli
