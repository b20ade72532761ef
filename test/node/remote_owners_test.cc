// RemoteOwners (core/node/remote_owners.h): a remote owner whose connection
// closes is freed only once its owner service refuses a connection. Real
// loopback sockets on one io_context, no processes.
#include "core/node/remote_owners.h"

#include <catch2/catch.hpp>
#include <algorithm>
#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio.hpp>

namespace {

using lumen::JobId;
using lumen::WorkerId;
using lumen::node::RemoteOwners;
namespace asio = boost::asio;

// Runs `io` until `done` or `limit` passes; true when done.
template <class F>
bool RunUntil(asio::io_context& io, F done, std::chrono::milliseconds limit) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (!done() && std::chrono::steady_clock::now() < end) {
    io.restart();
    io.run_for(std::chrono::milliseconds(10));
  }
  return done();
}

}  // namespace

TEST_CASE("a remote owner whose link closed keeps its key while its address answers, and is gone "
          "once it refuses") {
  // Invariant (reliability item 4): a closed remote-owner connection alone
  // frees nothing: while the owner's address accepts connections it is not
  // reported gone (several probe periods), and a new connection from the
  // same worker gets the same key back; once nothing listens there, it is
  // reported gone once, with its key, job and driver flag. An owner whose job
  // ended is forgotten without a report.
  asio::io_context io;
  std::optional<asio::ip::tcp::acceptor> owner_service;
  owner_service.emplace(io, asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  const std::string address =
      "127.0.0.1:" + std::to_string(owner_service->local_endpoint().port());
  std::vector<RemoteOwners::Gone> gone;
  RemoteOwners owners({.io = &io,
                       .session_dir = "/nonexistent-session",
                       .probe_period = std::chrono::milliseconds(20),
                       .connect_timeout = std::chrono::milliseconds(500),
                       .gone = [&](const RemoteOwners::Gone& g) { gone.push_back(g); }});
  const WorkerId worker = WorkerId::Random();
  const JobId job = JobId::Random();

  const uint64_t key =
      owners.OnHello(worker, "", job, address, /*is_driver=*/true, /*conn=*/11).value();
  CHECK(key == 11);
  owners.OnClosed(11);
  CHECK(owners.disconnected() == 1);
  // Accepted probes (the owner lives): nothing is gone over 10 probe periods.
  CHECK_FALSE(RunUntil(io, [&] { return !gone.empty(); }, std::chrono::milliseconds(200)));
  CHECK(owners.OnHello(worker, "", job, address, true, /*conn=*/12).value() == key);  // back: same key
  CHECK(owners.disconnected() == 0);

  owners.OnClosed(12);
  owner_service.reset();  // the process is gone: its port refuses
  REQUIRE(RunUntil(io, [&] { return !gone.empty(); }, std::chrono::seconds(5)));
  REQUIRE(gone.size() == 1);
  CHECK(gone[0].key == key);
  CHECK(gone[0].job == job);
  CHECK(gone[0].is_driver);
  CHECK(owners.known() == 0);
  CHECK_FALSE(RunUntil(io, [&] { return gone.size() > 1; }, std::chrono::milliseconds(100)));

  // A job's end forgets its owners, connected or not, without a report.
  const WorkerId other = WorkerId::Random();
  REQUIRE(owners.OnHello(other, "", job, "127.0.0.1:1", false, 13).ok());
  owners.OnClosed(13);
  owners.EndJob(job);
  CHECK(owners.known() == 0);
  CHECK_FALSE(RunUntil(io, [&] { return gone.size() > 1; }, std::chrono::milliseconds(100)));
}

TEST_CASE("the owners of a node the head declared dead are gone at once, connected or not, and "
          "no others, and later hellos from there are refused") {
  // Invariant (reliability item 4): a frozen or cut-off host's addresses do
  // not refuse a probe (they accept, or time out), so probes alone would keep
  // its owners' objects here until their job ends; the head declaring their
  // node dead frees them: every owner that said it runs there is reported
  // gone once, whether its link here is still open or closed, and owners of
  // other nodes (or that did not say their node) are untouched.
  asio::io_context io;
  asio::ip::tcp::acceptor alive_service(
      io, asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  const std::string address =
      "127.0.0.1:" + std::to_string(alive_service.local_endpoint().port());
  std::vector<RemoteOwners::Gone> gone;
  RemoteOwners owners({.io = &io,
                       .session_dir = "/nonexistent-session",
                       .probe_period = std::chrono::milliseconds(20),
                       .connect_timeout = std::chrono::milliseconds(500),
                       .gone = [&](const RemoteOwners::Gone& g) { gone.push_back(g); }});
  const std::string dead_node(lumen::NodeId::Random().Binary());
  const std::string other_node(lumen::NodeId::Random().Binary());
  const JobId job = JobId::Random();
  const uint64_t closed_key =
      owners.OnHello(WorkerId::Random(), dead_node, job, address, true, 21).value();
  const WorkerId open_worker = WorkerId::Random();
  const uint64_t open_key = owners.OnHello(open_worker, dead_node, job, address, false, 22).value();
  REQUIRE(owners.OnHello(WorkerId::Random(), other_node, job, address, false, 23).ok());
  REQUIRE(owners.OnHello(WorkerId::Random(), "", job, address, false, 24).ok());
  owners.OnClosed(21);
  // Its address still accepts: the probes find nothing dead.
  CHECK_FALSE(RunUntil(io, [&] { return !gone.empty(); }, std::chrono::milliseconds(200)));

  owners.NodeDied(std::string(lumen::NodeId::Random().Binary()));  // a node no owner named
  owners.NodeDied("");
  CHECK(gone.empty());
  owners.NodeDied(dead_node);
  REQUIRE(gone.size() == 2);
  std::vector<uint64_t> keys = {gone[0].key, gone[1].key};
  std::sort(keys.begin(), keys.end());
  CHECK(keys == std::vector<uint64_t>{closed_key, open_key});
  for (const auto& g : gone) {
    CHECK(g.job == job);
    CHECK(g.why.find("declared dead") != std::string::npos);
    // The link still open is named, for the caller to close: nothing more
    // may be recorded under the freed key; the closed one names none.
    CHECK(g.conn == (g.key == open_key ? 22u : 0u));
  }
  CHECK(owners.known() == 2);
  // A process there that connects again (a frozen host thawed, a healed
  // partition) is refused: the cluster gave up on it. Other nodes' are not.
  absl::StatusOr<uint64_t> late = owners.OnHello(open_worker, dead_node, job, address, false, 25);
  REQUIRE_FALSE(late.ok());
  CHECK(late.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(late.status().message().find("declared dead") != std::string::npos);
  CHECK(owners.OnHello(WorkerId::Random(), other_node, job, address, false, 26).ok());
  CHECK(owners.known() == 3);
  // The open link's later close, and the node's death said again, change nothing.
  owners.OnClosed(22);
  owners.NodeDied(dead_node);
  CHECK_FALSE(RunUntil(io, [&] { return gone.size() > 2; }, std::chrono::milliseconds(100)));
  CHECK(owners.known() == 3);
}
