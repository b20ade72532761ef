// The `--resources` JSON of `lumen start`: a flat object of numbers, anything
// else an error that says what is wrong.
#include "lumen/cli/resources_json.h"

#include <catch2/catch.hpp>

using lumen::cli::ParseResourcesJson;

TEST_CASE("resources JSON with numbers parses to the named quantities") {
  auto r = ParseResourcesJson(R"( {"ssd": 1, "accel":0.5 , "big": 2e3} )");
  REQUIRE(r.ok());
  CHECK(*r == std::map<std::string, double>{{"ssd", 1}, {"accel", 0.5}, {"big", 2000}});
  // Escapes in names are JSON's (a hand-made scanner once kept them raw).
  auto escaped = ParseResourcesJson(R"({"a\"b": 1, "\u00e9t\u00e9": 2})");
  REQUIRE(escaped.ok());
  CHECK(*escaped == std::map<std::string, double>{{"a\"b", 1}, {"\xc3\xa9t\xc3\xa9", 2}});
  auto empty = ParseResourcesJson("{}");
  REQUIRE(empty.ok());
  CHECK(empty->empty());
}

TEST_CASE("malformed resources JSON is an error that says what is wrong") {
  auto message = [](std::string_view text) {
    auto r = ParseResourcesJson(text);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == absl::StatusCode::kInvalidArgument);
    return std::string(r.status().message());
  };
  // Syntax errors: Boost.JSON's reason and where.
  for (std::string_view bad : {"{bad json", "", R"({"ssd" 1})", R"({"ssd": 1)",
                               R"({"ssd": 1 "x": 2})", R"({"ssd)", R"({"ssd": 1} x)"}) {
    INFO(bad);
    CHECK(message(bad).rfind("not valid JSON at byte ", 0) == 0);
  }
  CHECK(message(R"({"ssd" 1})").find("at byte 7") != std::string::npos);
  CHECK(message("[1]") == "expected a JSON object of resource names to numbers, e.g. {\"ssd\": 1}");
  CHECK(message("3") == message("[1]"));
  CHECK(message(R"({"ssd": "one"})") == "resource \"ssd\" needs a number");
  CHECK(message(R"({"ssd": [1]})") == "resource \"ssd\" needs a number");
}
