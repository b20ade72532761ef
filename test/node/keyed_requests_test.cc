// KeyedRequests (core/node/keyed_requests.h) over real Connections on socket
// pairs: a stand-in node "acts" on each dispatched lease request (counts a
// grant, numbered) and answers through OnReply, as LeaseReplies does; clients
// resend keyed requests as the worker does after a lost reply.
#include "core/node/keyed_requests.h"

#include <capnp/message.h>

#include <algorithm>
#include <boost/asio.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <memory>
#include <optional>
#include <vector>

#include "lumen/common/control_retry.h"

namespace {

using lumen::Connection;
using lumen::node::KeyedRequests;
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

// The node: each dispatched lease request is granted lease number `granted`
// (after the increment), at once or, with `defer`, at ReplyDeferred().
struct Node {
  boost::asio::io_context& io;
  KeyedRequests keyed;
  bool bound = true;
  uint64_t granted = 0;
  bool defer = false;
  std::vector<std::pair<std::shared_ptr<Connection>, uint64_t>> deferred;
  std::vector<std::shared_ptr<Connection>> conns;

  explicit Node(boost::asio::io_context& io) : io(io) {}
  Node(boost::asio::io_context& io, KeyedRequests::Limits limits) : io(io), keyed(limits) {}

  void Grant(Connection& conn, uint64_t request_id, uint64_t lease) {
    capnp::MallocMessageBuilder out;
    auto env = out.initRoot<proto::Envelope>();
    env.setRequestId(request_id);
    auto reply = env.initLeaseReply();
    reply.setGranted(true);
    reply.setLeaseId(lease);
    keyed.OnReply(conn.id(), request_id, out);
    conn.Send(out);
  }
  void ReplyDeferred() {
    for (auto& [conn, id] : deferred) Grant(*conn, id, granted);
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
          if (keyed.Repeat(c, msg, bound)) return;
          ++granted;
          if (defer) {
            deferred.emplace_back(c.shared_from_this(), msg.getRequestId());
          } else {
            Grant(c, msg.getRequestId(), granted);
          }
        },
        [](Connection&, const absl::Status&) {});
    return Connection::Create(ToGeneric(std::move(b), io));
  }
};

// A lease request with `key` (or none) under request id `id`.
void Send(Connection& conn, uint64_t id, std::optional<lumen::RetryKeyValue> key) {
  capnp::MallocMessageBuilder out;
  auto env = out.initRoot<proto::Envelope>();
  env.setRequestId(id);
  auto lease = env.initRequestLease();
  if (key) {
    auto k = lease.initRetryKey();
    k.setClient(key->client);
    k.setRequest(key->request);
  }
  conn.Send(out);
}

struct Answer {
  uint64_t request_id = 0;
  uint64_t lease = 0;
};
void Record(const std::shared_ptr<Connection>& client, std::vector<Answer>* answers) {
  client->Start(
      [answers](Connection&, proto::Envelope::Reader msg) {
        answers->push_back({msg.getRequestId(), msg.getLeaseReply().getLeaseId()});
      },
      [](Connection&, const absl::Status&) {});
}

}  // namespace

TEST_CASE("node: a resent keyed lease request gets the first grant and no second lease",
          "[keyed]") {
  // Invariants (reliability item 9): a lease request without a key is acted
  // on each time; a keyed one once however often it is resent on its
  // connection, each copy answered with the first grant (same lease) under
  // its own request id; the same request number from another client is
  // another request.
  boost::asio::io_context io;
  Node node(io);
  auto conn = node.Connect();
  std::vector<Answer> answers;
  Record(conn, &answers);
  Send(*conn, 1, std::nullopt);
  Send(*conn, 1, std::nullopt);
  REQUIRE(RunUntil(io, [&] { return answers.size() == 2; }));
  CHECK(node.granted == 2);

  lumen::RetryKeyValue key{42, 7};
  Send(*conn, 5, key);
  REQUIRE(RunUntil(io, [&] { return answers.size() == 3; }));
  CHECK(answers[2].lease == 3);
  Send(*conn, 5, key);  // the reply was lost: resent as it was
  Send(*conn, 6, key);
  REQUIRE(RunUntil(io, [&] { return answers.size() == 5; }));
  CHECK(node.granted == 3);
  CHECK(answers[3].request_id == 5);
  CHECK(answers[3].lease == 3);
  CHECK(answers[4].request_id == 6);
  CHECK(answers[4].lease == 3);
  CHECK(node.keyed.replayed() == 2);
  Send(*conn, 7, lumen::RetryKeyValue{43, 7});
  REQUIRE(RunUntil(io, [&] { return answers.size() == 6; }));
  CHECK(answers[5].lease == 4);
  CHECK(node.keyed.size() == 2);
}

TEST_CASE("node: a repeat of an unanswered lease request is answered once, by the first's grant",
          "[keyed]") {
  // Invariants: a resend while the first is queued is not acted on; under the
  // same request id on the same connection it is answered by the first's own
  // reply (one answer, not two); under another id it gets a copy when the
  // first is answered.
  boost::asio::io_context io;
  Node node(io);
  node.defer = true;
  auto conn = node.Connect();
  std::vector<Answer> answers;
  Record(conn, &answers);
  lumen::RetryKeyValue key{9, 1};
  Send(*conn, 3, key);
  REQUIRE(RunUntil(io, [&] { return node.deferred.size() == 1; }));
  Send(*conn, 3, key);
  Send(*conn, 4, key);
  REQUIRE(RunUntil(io, [&] { return node.keyed.replayed() == 2; }));
  CHECK(answers.empty());
  node.ReplyDeferred();
  REQUIRE(RunUntil(io, [&] { return answers.size() == 2; }));
  CHECK(node.granted == 1);
  std::sort(answers.begin(), answers.end(),
            [](const Answer& a, const Answer& b) { return a.request_id < b.request_id; });
  CHECK(answers[0].request_id == 3);
  CHECK(answers[1].request_id == 4);
  CHECK(answers[0].lease == 1);
  CHECK(answers[1].lease == 1);
  // No third answer: one sent after them comes next on the ordered connection.
  node.defer = false;
  Send(*conn, 10, std::nullopt);
  REQUIRE(RunUntil(io, [&] { return answers.size() >= 3; }));
  CHECK(answers.size() == 3);
  CHECK(answers[2].request_id == 10);
}

TEST_CASE("node: a bound answer is not replayed to another connection once the first closed",
          "[keyed]") {
  // Invariants: a lease is held by the connection it was granted on and ends
  // when it closes; a repeat on a new connection while the first is open gets
  // the first grant, after it closed it is acted on anew (a new lease, the
  // only one alive). An unbound answer (the head's bundle batches) is
  // replayed on any connection.
  boost::asio::io_context io;
  Node node(io);
  lumen::RetryKeyValue key{5, 5};
  auto first = node.Connect();
  std::vector<Answer> a1;
  Record(first, &a1);
  Send(*first, 1, key);
  REQUIRE(RunUntil(io, [&] { return a1.size() == 1; }));
  auto second = node.Connect();
  std::vector<Answer> a2;
  Record(second, &a2);
  Send(*second, 1, key);
  REQUIRE(RunUntil(io, [&] { return a2.size() == 1; }));
  CHECK(a2[0].lease == 1);
  CHECK(node.granted == 1);
  first->Close(absl::CancelledError("gone"));
  REQUIRE(RunUntil(io, [&] { return node.conns[0]->closed(); }));
  Send(*second, 2, key);
  REQUIRE(RunUntil(io, [&] { return a2.size() == 2; }));
  CHECK(a2[1].lease == 2);
  CHECK(node.granted == 2);

  node.bound = false;
  lumen::RetryKeyValue unbound{6, 1};
  auto third = node.Connect();
  std::vector<Answer> a3;
  Record(third, &a3);
  Send(*third, 1, unbound);
  REQUIRE(RunUntil(io, [&] { return a3.size() == 1; }));
  third->Close(absl::CancelledError("gone"));
  REQUIRE(RunUntil(io, [&] { return node.conns[2]->closed(); }));
  Send(*second, 3, unbound);
  REQUIRE(RunUntil(io, [&] { return a2.size() == 3; }));
  CHECK(a2[2].lease == a3[0].lease);
  CHECK(node.granted == 3);
}

TEST_CASE("node: the keyed table is bounded per client and in clients", "[keyed]") {
  // Invariants: at most `per_client` keys per client and `clients` clients
  // are kept (oldest key, least recently heard client forgotten first); a
  // forgotten key is acted on again, a kept one is not.
  boost::asio::io_context io;
  Node node(io, {.per_client = 2, .clients = 2});
  auto conn = node.Connect();
  std::vector<Answer> answers;
  Record(conn, &answers);
  auto send = [&](uint64_t client, uint64_t request) {
    size_t before = answers.size();
    Send(*conn, 1, lumen::RetryKeyValue{client, request});
    REQUIRE(RunUntil(io, [&] { return answers.size() == before + 1; }));
    return answers.back().lease;
  };
  CHECK(send(1, 1) == 1);
  CHECK(send(1, 2) == 2);
  CHECK(send(1, 3) == 3);  // forgets (1, 1)
  CHECK(node.keyed.size() == 2);
  CHECK(send(1, 2) == 2);  // kept
  CHECK(send(1, 1) == 4);  // forgotten: acted on again (forgets (1, 2))
  CHECK(send(2, 1) == 5);
  CHECK(send(3, 1) == 6);  // a third client: client 2 (heard from last) stays, 1 goes
  CHECK(node.keyed.size() == 2);
  CHECK(send(2, 1) == 5);
  CHECK(send(1, 3) == 7);
  CHECK(node.keyed.size() <= 4);
}
