// LogLineSplitter: a byte stream read in chunks of any size becomes the same
// lines; long lines come in bounded pieces; the unterminated rest comes at Finish.
#include "core/node/log_line_splitter.h"

#include <catch2/catch.hpp>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace {

using lumen::node::LogLineSplitter;
using Piece = std::pair<std::string, bool>;  // text, complete

std::vector<Piece> Split(LogLineSplitter& splitter, const std::vector<std::string>& chunks,
                         bool finish) {
  std::vector<Piece> out;
  auto emit = [&](std::string_view text, bool complete) { out.emplace_back(std::string(text), complete); };
  for (const auto& c : chunks) splitter.Feed(c, emit);
  if (finish) splitter.Finish(emit);
  return out;
}

}  // namespace

TEST_CASE("whole lines in one chunk come out one by one, without their newline") {
  LogLineSplitter splitter(100);
  auto out = Split(splitter, {"alpha\nbeta\r\n\ngamma\n"}, false);
  REQUIRE(out == std::vector<Piece>{{"alpha", true}, {"beta", true}, {"", true}, {"gamma", true}});
  REQUIRE(splitter.pending_bytes() == 0);
}

TEST_CASE("a line split across reads is held until its newline") {
  LogLineSplitter splitter(100);
  std::vector<Piece> out;
  auto emit = [&](std::string_view text, bool complete) { out.emplace_back(std::string(text), complete); };
  splitter.Feed("hel", emit);
  REQUIRE(out.empty());
  REQUIRE(splitter.pending_bytes() == 3);
  splitter.Feed("lo wor", emit);
  REQUIRE(out.empty());
  splitter.Feed("ld\nnext", emit);
  REQUIRE(out == std::vector<Piece>{{"hello world", true}});
  REQUIRE(splitter.pending_bytes() == 4);
  splitter.Finish(emit);
  REQUIRE(out == std::vector<Piece>{{"hello world", true}, {"next", false}});
  REQUIRE(splitter.pending_bytes() == 0);
  // Nothing pending: Finish emits nothing.
  splitter.Finish(emit);
  REQUIRE(out.size() == 2);
}

TEST_CASE("a line longer than the limit comes in pieces of the limit and memory stays bounded") {
  LogLineSplitter splitter(8);
  // 20 bytes then a newline, fed one byte at a time.
  std::string line = "abcdefghijklmnopqrst";
  std::vector<std::string> chunks;
  for (char c : line + "\nok\n") chunks.emplace_back(1, c);
  std::vector<Piece> out;
  auto emit = [&](std::string_view text, bool complete) {
    out.emplace_back(std::string(text), complete);
  };
  for (const auto& c : chunks) {
    splitter.Feed(c, emit);
    REQUIRE(splitter.pending_bytes() <= 8);
  }
  REQUIRE(out == std::vector<Piece>{{"abcdefgh", false}, {"ijklmnop", false}, {"qrst", true},
                                    {"ok", true}});
}

TEST_CASE("a line of exactly the limit with its newline comes out whole") {
  LogLineSplitter splitter(4);
  auto out = Split(splitter, {"abcd\nabcde\n"}, false);
  REQUIRE(out == std::vector<Piece>{{"abcd", true}, {"abcd", false}, {"e", true}});
}

TEST_CASE("any chunking of a stream gives the same lines as one chunk") {
  std::mt19937 rng(Catch::rngSeed());
  INFO("seed " << Catch::rngSeed());
  std::string stream;
  for (int i = 0; i < 200; ++i) {
    stream += std::string(rng() % 40, static_cast<char>('a' + i % 26));
    stream += '\n';
  }
  stream += "tail";
  LogLineSplitter whole(32);
  auto expected = Split(whole, {stream}, true);
  for (int round = 0; round < 20; ++round) {
    std::vector<std::string> chunks;
    for (size_t at = 0; at < stream.size();) {
      size_t n = 1 + rng() % 50;
      chunks.push_back(stream.substr(at, n));
      at += n;
    }
    LogLineSplitter splitter(32);
    REQUIRE(Split(splitter, chunks, true) == expected);
  }
  // The pieces put back together are the stream.
  std::string joined;
  for (const auto& [text, complete] : expected) joined += text + (complete ? "\n" : "");
  REQUIRE(joined == stream);
}
