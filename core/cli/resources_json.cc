#include "lumen/cli/resources_json.h"

#include <cctype>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace lumen::cli {

absl::StatusOr<std::map<std::string, double>> ParseResourcesJson(std::string_view text) {
  std::map<std::string, double> out;
  size_t i = 0;
  auto skip = [&] {
    while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  };
  auto error = [](std::string message) { return absl::InvalidArgumentError(std::move(message)); };
  skip();
  if (i >= text.size() || text[i] != '{') return error("expected '{'");
  ++i;
  skip();
  if (i < text.size() && text[i] == '}') ++i;
  else {
    while (true) {
      skip();
      if (i >= text.size() || text[i] != '"') return error("expected a quoted resource name");
      size_t end = text.find('"', i + 1);
      if (end == std::string_view::npos) return error("unterminated name");
      std::string name(text.substr(i + 1, end - i - 1));
      i = end + 1;
      skip();
      if (i >= text.size() || text[i] != ':') {
        return error(absl::StrCat("expected ':' after \"", name, "\""));
      }
      ++i;
      skip();
      size_t start = i;
      while (i < text.size() &&
             (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.' ||
              text[i] == 'e' || text[i] == 'E' || text[i] == '-' || text[i] == '+')) {
        ++i;
      }
      double qty = 0;
      if (!absl::SimpleAtod(std::string(text.substr(start, i - start)), &qty)) {
        return error(absl::StrCat("resource \"", name, "\" needs a number"));
      }
      out[name] = qty;
      skip();
      if (i < text.size() && text[i] == ',') {
        ++i;
        continue;
      }
      if (i < text.size() && text[i] == '}') {
        ++i;
        break;
      }
      return error(i < text.size() ? "expected ',' or '}'" : "unterminated object");
    }
  }
  skip();
  if (i != text.size()) return error("unexpected text after the closing '}'");
  return out;
}

}  // namespace lumen::cli
