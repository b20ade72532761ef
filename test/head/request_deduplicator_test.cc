// RequestDeduplicator (core/head/request_deduplicator.h) over real
// Connections on socket pairs: a stand-in handler "acts" on each dispatched
// request and replies; clients resend keyed requests as CallHead does.
#include "core/head/request_deduplicator.h"

#include <capnp/message.h>

#include <boost/asio.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "lumen/common/control_retry.h"
#include "lumen/common/proto_util.h"

namespace {

using lumen::Connection;
using lumen::head::RequestDeduplicator;
namespace proto = lumen::proto;

lumen::Socket ToGeneric(boost::asio::local::stream_protocol::socket s, boost::asio::io_context& io) {
  int fd = s.release();
  return lumen::Socket(io, boost::asio::generic::stream_protocol(AF_UNIX, 0), fd);
}

template <typename Pred>
bool RunUntil(boost::asio::io_context& io, Pred done) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    if (io.stopped()) io.restart();
    io.run_one_for(std::chrono::milliseconds(5));
  }
  return true;
}

// The head side: each dispatched createPlacementGroup is "acted on" (counted)
// and answered with a state naming the act's number, unless `defer` holds,
// then the reply waits in `deferred` until Reply().
struct Server {
  boost::asio::io_context& io;
  RequestDeduplicator dedup;
  int acted = 0;
  bool defer = false;
  std::vector<std::pair<std::shared_ptr<Connection>, uint64_t>> deferred;
  std::vector<std::shared_ptr<Connection>> conns;

  explicit Server(boost::asio::io_context& io) : io(io) {}
  Server(boost::asio::io_context& io, RequestDeduplicator::Limits limits) : io(io), dedup(limits) {}

  static void Reply(Connection& conn, uint64_t request_id, int act) {
    capnp::MallocMessageBuilder out;
    auto env = out.initRoot<proto::Envelope>();
    env.setRequestId(request_id);
    env.initPlacementGroupState().setState("act-" + std::to_string(act));
    conn.Send(out);
  }
  void ReplyDeferred() {
    for (auto& [conn, id] : deferred) Reply(*conn, id, acted);
    deferred.clear();
  }
  // A new client connection; returns the client's end.
  std::shared_ptr<Connection> Connect() {
    boost::asio::local::stream_protocol::socket a(io), b(io);
    boost::asio::local::connect_pair(a, b);
    auto server = Connection::Create(ToGeneric(std::move(a), io));
    conns.push_back(server);
    server->Start(
        [this](Connection& c, proto::Envelope::Reader msg) {
          if (dedup.Repeat(c, msg)) return;
          ++acted;
          if (defer) {
            deferred.emplace_back(c.shared_from_this(), msg.getRequestId());
          } else {
            Reply(c, msg.getRequestId(), acted);
          }
        },
        [](Connection&, const absl::Status&) {});
    return Connection::Create(ToGeneric(std::move(b), io));
  }
};

// A client's request: createPlacementGroup with `key` (or none), request id `id`.
void Send(Connection& conn, uint64_t id, std::optional<lumen::RetryKeyValue> key) {
  capnp::MallocMessageBuilder out;
  auto env = out.initRoot<proto::Envelope>();
  env.setRequestId(id);
  auto spec = env.initCreatePlacementGroup();
  if (key) {
    auto k = spec.initRetryKey();
    k.setClient(key->client);
    k.setRequest(key->request);
  }
  conn.Send(out);
}

struct Answer {
  uint64_t request_id = 0;
  std::string state;
};
// Starts `client`, recording its answers.
void Record(const std::shared_ptr<Connection>& client, std::vector<Answer>* answers) {
  client->Start(
      [answers](Connection&, proto::Envelope::Reader msg) {
        answers->push_back({msg.getRequestId(), msg.getPlacementGroupState().getState().cStr()});
      },
      [](Connection&, const absl::Status&) {});
}

}  // namespace

TEST_CASE("a repeated key is answered with the first reply and not acted on again", "[dedup]") {
  // Invariants: requests without a key are each acted on; a keyed request is
  // acted on once however often it is resent (on the same or a new
  // connection), and every copy gets the first reply under its own request id.
  boost::asio::io_context io;
  Server server(io);
  std::vector<Answer> answers;
  auto first = server.Connect();
  Record(first, &answers);
  Send(*first, 7, std::nullopt);
  Send(*first, 8, std::nullopt);
  REQUIRE(RunUntil(io, [&] { return answers.size() == 2; }));
  CHECK(server.acted == 2);

  lumen::RetryKeyValue key{42, 1};
  Send(*first, 9, key);
  REQUIRE(RunUntil(io, [&] { return answers.size() == 3; }));
  CHECK(answers[2].state == "act-3");
  auto second = server.Connect();
  std::vector<Answer> again;
  Record(second, &again);
  Send(*second, 1, key);
  Send(*second, 2, key);
  REQUIRE(RunUntil(io, [&] { return again.size() == 2; }));
  CHECK(server.acted == 3);
  CHECK(again[0].request_id == 1);
  CHECK(again[0].state == "act-3");
  CHECK(again[1].request_id == 2);
  CHECK(again[1].state == "act-3");
  CHECK(server.dedup.replayed() == 2);
  // Another client with the same request number is another request.
  Send(*second, 3, lumen::RetryKeyValue{43, 1});
  REQUIRE(RunUntil(io, [&] { return again.size() == 3; }));
  CHECK(again[2].state == "act-4");
  CHECK(server.dedup.size() == 2);
}

TEST_CASE("a repeat of an unanswered request gets the reply when it comes, also after the first "
          "connection closed", "[dedup]") {
  // Invariants: a resend while the first attempt is still being handled is
  // not acted on and is answered when the first is; the reply is kept even
  // when the first attempt's connection has closed (the client gave up on it).
  boost::asio::io_context io;
  Server server(io);
  server.defer = true;
  lumen::RetryKeyValue key{7, 99};
  auto first = server.Connect();
  std::vector<Answer> lost;
  Record(first, &lost);
  Send(*first, 1, key);
  REQUIRE(RunUntil(io, [&] { return server.deferred.size() == 1; }));
  first->Close(absl::CancelledError("the client gave up on this attempt"));
  auto second = server.Connect();
  std::vector<Answer> answers;
  Record(second, &answers);
  Send(*second, 5, key);
  REQUIRE(RunUntil(io, [&] { return server.dedup.replayed() == 1; }));
  CHECK(answers.empty());
  server.ReplyDeferred();
  REQUIRE(RunUntil(io, [&] { return answers.size() == 1; }));
  CHECK(answers[0].request_id == 5);
  CHECK(answers[0].state == "act-1");
  CHECK(server.acted == 1);
  // A third attempt, after the answer: replayed from the table.
  auto third = server.Connect();
  std::vector<Answer> late;
  Record(third, &late);
  Send(*third, 6, key);
  REQUIRE(RunUntil(io, [&] { return late.size() == 1; }));
  CHECK(late[0].state == "act-1");
  CHECK(server.acted == 1);
}

TEST_CASE("the table is bounded per client and in clients", "[dedup]") {
  // Invariants: at most `per_client` keys per client and `clients` clients are
  // kept (oldest key, least recently heard client forgotten first); a
  // forgotten key is acted on again, a kept one is not.
  boost::asio::io_context io;
  Server server(io, {.per_client = 2, .clients = 2});
  auto conn = server.Connect();
  std::vector<Answer> answers;
  Record(conn, &answers);
  auto send = [&](uint64_t client, uint64_t request) {
    size_t before = answers.size();
    Send(*conn, 1, lumen::RetryKeyValue{client, request});
    REQUIRE(RunUntil(io, [&] { return answers.size() == before + 1; }));
  };
  // Each keyed request on this one connection: the tap keeps the first frame
  // sent after it, so send them one at a time.
  send(1, 1);
  send(1, 2);
  send(1, 3);  // forgets (1, 1)
  CHECK(server.acted == 3);
  CHECK(server.dedup.size() == 2);
  send(1, 3);
  CHECK(server.acted == 3);
  send(1, 1);
  CHECK(server.acted == 4);
  send(2, 1);
  send(1, 3);  // client 1 heard from after client 2
  send(3, 1);  // forgets client 2
  CHECK(server.acted == 6);
  send(1, 3);
  CHECK(server.acted == 6);
  send(2, 1);
  CHECK(server.acted == 7);
}
