// The `--resources` JSON of `lumen start`: a flat object of numbers, anything
// else an error that says what is wrong.
#include "lumen/cli/resources_json.h"

#include <catch2/catch.hpp>

using lumen::cli::ParseResourcesJson;

TEST_CASE("resources JSON with numbers parses to the named quantities") {
  auto r = ParseResourcesJson(R"( {"ssd": 1, "accel":0.5 , "big": 2e3} )");
  REQUIRE(r.ok());
  CHECK(*r == std::map<std::string, double>{{"ssd", 1}, {"accel", 0.5}, {"big", 2000}});
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
  CHECK(message("{bad json") == "expected a quoted resource name");
  CHECK(message("") == "expected '{'");
  CHECK(message("[1]") == "expected '{'");
  CHECK(message(R"({"ssd" 1})") == "expected ':' after \"ssd\"");
  CHECK(message(R"({"ssd": "one"})") == "resource \"ssd\" needs a number");
  CHECK(message(R"({"ssd": 1)") == "unterminated object");
  CHECK(message(R"({"ssd": 1 "x": 2})") == "expected ',' or '}'");
  CHECK(message(R"({"ssd)") == "unterminated name");
  CHECK(message(R"({"ssd": 1} x)") == "unexpected text after the closing '}'");
}
