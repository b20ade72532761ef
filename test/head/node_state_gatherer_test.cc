// NodeStateGatherer against peers that fail: a node that refuses the
// connection, one that accepts and never answers (the round ends at its
// timeout with the other's answer intact), and requests that arrive while a
// round is in flight (they share it). Real sockets on loopback, no daemons.
#include "core/head/node_state_gatherer.h"

#include <boost/asio.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <optional>
#include <vector>

namespace lumen::head {
namespace {

namespace asio = boost::asio;

// Invariant: every Gather calls back exactly once, with one answer per target
// in target order, within about `timeout` even when a node never answers.
TEST_CASE("NodeStateGatherer reports nodes that refuse or stay silent, within its timeout") {
  asio::io_context io;
  // A "node" that accepts and says nothing.
  asio::ip::tcp::acceptor silent(io, asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  std::optional<asio::ip::tcp::socket> accepted;
  silent.async_accept([&](const boost::system::error_code& ec, asio::ip::tcp::socket s) {
    if (!ec) accepted.emplace(std::move(s));
  });
  // A port nobody listens on: bind one, note it, close it.
  int refused_port;
  {
    asio::ip::tcp::acceptor probe(io, asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    refused_port = probe.local_endpoint().port();
  }
  NodeStateGatherer gatherer({.io = &io, .token = "", .timeout = std::chrono::milliseconds(300)});
  NodeId refusing = NodeId::Random(), quiet = NodeId::Random();
  std::vector<NodeStateGatherer::Target> targets = {
      {refusing, "127.0.0.1:" + std::to_string(refused_port)},
      {quiet, "127.0.0.1:" + std::to_string(silent.local_endpoint().port())}};

  int first_calls = 0, second_calls = 0;
  std::vector<NodeAnswer> first, second;
  auto start = std::chrono::steady_clock::now();
  gatherer.Gather(targets, [&](std::vector<NodeAnswer> answers) {
    ++first_calls;
    first = std::move(answers);
  });
  // While the first round is in flight: joins it.
  gatherer.Gather({}, [&](std::vector<NodeAnswer> answers) {
    ++second_calls;
    second = std::move(answers);
  });
  io.run_for(std::chrono::seconds(5));
  auto took = std::chrono::steady_clock::now() - start;

  CHECK(first_calls == 1);
  CHECK(second_calls == 1);
  REQUIRE(first.size() == 2);
  CHECK(first[0].node == refusing);
  CHECK(first[0].status.code() == absl::StatusCode::kUnavailable);
  CHECK(first[1].node == quiet);
  CHECK(first[1].status.code() == absl::StatusCode::kDeadlineExceeded);
  CHECK(first[1].actors.empty());
  CHECK(second.size() == 2);  // the shared round's answers
  CHECK(accepted.has_value());
  CHECK(took < std::chrono::seconds(3));

  // The round is over: a new Gather starts a new one.
  int third_calls = 0;
  gatherer.Gather({}, [&](std::vector<NodeAnswer> answers) {
    ++third_calls;
    CHECK(answers.empty());
  });
  io.restart();
  io.run_for(std::chrono::seconds(1));
  CHECK(third_calls == 1);
}

}  // namespace
}  // namespace lumen::head
