#include "lumen/objectstore/transfer.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <future>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio.hpp>
#include <catch2/catch.hpp>

namespace lumen::objectstore {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using namespace std::chrono_literals;

constexpr uint64_t kMiB = 1 << 20;

uint8_t PatternByte(uint64_t seed, uint64_t i) {
  return static_cast<uint8_t>((i * 2654435761u + seed * 97 + (i >> 13)) & 0xff);
}

std::vector<uint8_t> Pattern(uint64_t seed, uint64_t size) {
  std::vector<uint8_t> v(size);
  for (uint64_t i = 0; i < size; ++i) v[i] = PatternByte(seed, i);
  return v;
}

// Runs `io` in the calling thread until `pred` holds; false after `limit`.
bool RunUntil(asio::io_context& io, const std::function<bool()>& pred,
              std::chrono::seconds limit = 60s) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    if (io.stopped()) io.restart();
    io.run_one_for(50ms);
  }
  return true;
}

// A TransferServer over an in-memory object map, on its own io thread.
class ServerThread {
 public:
  explicit ServerThread(std::string token = "", int port = 0) {
    server_ = MakeServer(std::move(token));
    REQUIRE(server_->Listen("127.0.0.1", port).ok());
    address_ = server_->address();
  }
  ~ServerThread() { Stop(); }

  // Objects must be added before Start (the io thread reads the map).
  void Add(const ObjectId& id, std::vector<uint8_t> bytes) { objects_[id] = std::move(bytes); }
  const std::vector<uint8_t>& Get(const ObjectId& id) { return objects_.at(id); }

  void Start() {
    thread_ = std::thread([this] { io_.run(); });
  }
  // Destroys the server on its io thread, then stops the thread.
  void Stop() {
    if (!thread_.joinable()) {
      server_.reset();
      return;
    }
    std::promise<void> destroyed;
    asio::post(io_, [&] {
      server_.reset();
      destroyed.set_value();
    });
    destroyed.get_future().wait();
    guard_.reset();
    thread_.join();
  }

  // The first pin of an object posts the server's destruction (mid-transfer).
  void DestroyOnFirstPin() { destroy_on_pin_ = true; }

  const std::string& address() const { return address_; }
  int port() const { return std::stoi(address_.substr(address_.rfind(':') + 1)); }
  int pins() const { return pins_; }
  int unpins() const { return unpins_; }

 private:
  std::unique_ptr<TransferServer> MakeServer(std::string token) {
    return std::make_unique<TransferServer>(
        io_,
        [this](const ObjectId& id) -> absl::StatusOr<std::span<const uint8_t>> {
          auto it = objects_.find(id);
          if (it == objects_.end()) {
            return absl::NotFoundError("object " + id.Hex() + " is not in this store");
          }
          ++pins_;
          if (destroy_on_pin_) {
            destroy_on_pin_ = false;
            asio::post(io_, [this] { server_.reset(); });
          }
          return std::span<const uint8_t>(it->second.data(), it->second.size());
        },
        [this](const ObjectId&) { ++unpins_; }, std::move(token));
  }

  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> guard_ = asio::make_work_guard(io_);
  std::map<ObjectId, std::vector<uint8_t>> objects_;
  std::unique_ptr<TransferServer> server_;
  std::string address_;
  std::thread thread_;
  std::atomic<int> pins_{0};
  std::atomic<int> unpins_{0};
  bool destroy_on_pin_ = false;
};

// One pull's outcome.
struct PullResult {
  std::optional<absl::Status> status;
  int calls = 0;
  std::function<void(absl::Status)> Callback() {
    return [this](absl::Status s) {
      ++calls;
      status = std::move(s);
    };
  }
  bool done() const { return status.has_value(); }
};

absl::Status PullOnce(TransferClient& client, asio::io_context& io, const std::string& address,
                      const ObjectId& id, uint64_t size, uint8_t* dest) {
  PullResult r;
  client.Pull(address, id, size, dest, r.Callback());
  REQUIRE(RunUntil(io, [&] { return r.done(); }));
  CHECK(r.calls == 1);
  return *r.status;
}

TEST_CASE("Transfer: a 64 MiB object arrives intact in several pipelined chunks", "[transfer]") {
  ServerThread server;
  ObjectId id = ObjectId::ForPut();
  server.Add(id, Pattern(1, 64 * kMiB));
  server.Start();

  asio::io_context io;
  TransferClient client(io, "", /*chunk_bytes=*/1 * kMiB, /*window=*/4);
  std::vector<uint8_t> dest(64 * kMiB, 0);
  absl::Status s = PullOnce(client, io, server.address(), id, dest.size(), dest.data());
  REQUIRE(s.ok());
  CHECK(std::memcmp(dest.data(), server.Get(id).data(), dest.size()) == 0);
  CHECK(client.num_connections() == 1);

  // The connection is reused for the next pull.
  std::vector<uint8_t> again(64 * kMiB, 0);
  REQUIRE(PullOnce(client, io, server.address(), id, again.size(), again.data()).ok());
  CHECK(again == dest);
  CHECK(client.num_connections() == 1);
  server.Stop();
  CHECK(server.pins() >= 1);
  CHECK(server.pins() == server.unpins());
}

TEST_CASE("Transfer: sizes that are not a multiple of the chunk", "[transfer]") {
  ServerThread server;
  const std::vector<uint64_t> sizes = {1, 4095, kMiB - 1, kMiB + 1, 3 * kMiB + 12345};
  std::vector<ObjectId> ids;
  for (size_t i = 0; i < sizes.size(); ++i) {
    ids.push_back(ObjectId::ForPut());
    server.Add(ids.back(), Pattern(10 + i, sizes[i]));
  }
  server.Start();

  asio::io_context io;
  TransferClient client(io, "", /*chunk_bytes=*/256 * 1024, /*window=*/3);
  for (size_t i = 0; i < sizes.size(); ++i) {
    std::vector<uint8_t> dest(sizes[i] + 16, 0xEE);
    REQUIRE(PullOnce(client, io, server.address(), ids[i], sizes[i], dest.data()).ok());
    CHECK(std::memcmp(dest.data(), server.Get(ids[i]).data(), sizes[i]) == 0);
    for (size_t j = sizes[i]; j < dest.size(); ++j) REQUIRE(dest[j] == 0xEE);  // No overrun.
  }
}

TEST_CASE("Transfer: a zero-size object with server and client on one io_context", "[transfer]") {
  asio::io_context io;
  std::map<ObjectId, std::vector<uint8_t>> objects;
  ObjectId empty = ObjectId::ForPut();
  objects[empty] = {};
  int pins = 0, unpins = 0;
  TransferServer server(
      io,
      [&](const ObjectId& id) -> absl::StatusOr<std::span<const uint8_t>> {
        auto it = objects.find(id);
        if (it == objects.end()) return absl::NotFoundError("no such object " + id.Hex());
        ++pins;
        return std::span<const uint8_t>(it->second.data(), it->second.size());
      },
      [&](const ObjectId&) { ++unpins; });
  REQUIRE(server.Listen("127.0.0.1").ok());

  TransferClient client(io);
  uint8_t byte = 0x5A;
  REQUIRE(PullOnce(client, io, server.address(), empty, 0, &byte).ok());
  CHECK(byte == 0x5A);
  // A zero-size pull still checks that the object exists.
  absl::Status missing = PullOnce(client, io, server.address(), ObjectId::ForPut(), 0, &byte);
  CHECK(missing.code() == absl::StatusCode::kNotFound);
  CHECK(pins == 1);
  CHECK(pins == unpins);
}

TEST_CASE("Transfer: concurrent pulls of different objects from one server", "[transfer]") {
  ServerThread server;
  ObjectId a = ObjectId::ForPut(), b = ObjectId::ForPut(), c = ObjectId::ForPut();
  server.Add(a, Pattern(2, 9 * kMiB + 7));
  server.Add(b, Pattern(3, 5 * kMiB + 3));
  server.Add(c, Pattern(4, 7 * kMiB));
  server.Start();

  asio::io_context io;
  TransferClient client(io, "", /*chunk_bytes=*/kMiB, /*window=*/4);
  TransferClient other(io, "", /*chunk_bytes=*/512 * 1024, /*window=*/2);  // A second connection.
  std::vector<uint8_t> da(server.Get(a).size()), db(server.Get(b).size()), dc(server.Get(c).size());
  PullResult ra, rb, rc;
  client.Pull(server.address(), a, da.size(), da.data(), ra.Callback());
  client.Pull(server.address(), b, db.size(), db.data(), rb.Callback());
  other.Pull(server.address(), c, dc.size(), dc.data(), rc.Callback());
  CHECK(!ra.done());  // `done` never runs from inside Pull.
  REQUIRE(RunUntil(io, [&] { return ra.done() && rb.done() && rc.done(); }));
  REQUIRE(ra.status->ok());
  REQUIRE(rb.status->ok());
  REQUIRE(rc.status->ok());
  CHECK(da == server.Get(a));
  CHECK(db == server.Get(b));
  CHECK(dc == server.Get(c));
  CHECK(client.num_connections() == 1);
  server.Stop();
  CHECK(server.pins() == server.unpins());
}

TEST_CASE("Transfer: a missing object or a wrong size fails with the server's message",
          "[transfer]") {
  ServerThread server;
  ObjectId present = ObjectId::ForPut();
  server.Add(present, Pattern(5, 3 * kMiB));
  server.Start();

  asio::io_context io;
  TransferClient client(io, "", kMiB, 4);
  std::vector<uint8_t> dest(4 * kMiB);

  ObjectId missing = ObjectId::ForPut();
  absl::Status s = PullOnce(client, io, server.address(), missing, kMiB, dest.data());
  CHECK(s.code() == absl::StatusCode::kNotFound);
  CHECK(std::string(s.message()).find(missing.Hex()) != std::string::npos);
  CHECK(std::string(s.message()).find("is not in this store") != std::string::npos);

  // Bigger and smaller than the real object: both are caught.
  s = PullOnce(client, io, server.address(), present, 4 * kMiB, dest.data());
  CHECK(s.code() == absl::StatusCode::kDataLoss);
  CHECK(std::string(s.message()).find("expected") != std::string::npos);
  s = PullOnce(client, io, server.address(), present, 2 * kMiB, dest.data());
  CHECK(s.code() == absl::StatusCode::kDataLoss);

  // The connection survives errors: the right size still works.
  REQUIRE(PullOnce(client, io, server.address(), present, 3 * kMiB, dest.data()).ok());
  CHECK(std::memcmp(dest.data(), server.Get(present).data(), 3 * kMiB) == 0);
  CHECK(client.num_connections() == 1);
  server.Stop();
  CHECK(server.pins() == server.unpins());
}

TEST_CASE("Transfer: a wrong token is refused and the server keeps serving", "[transfer]") {
  ServerThread server("s3cret");
  ObjectId id = ObjectId::ForPut();
  server.Add(id, Pattern(6, 2 * kMiB + 1));
  server.Start();

  asio::io_context io;
  std::vector<uint8_t> dest(2 * kMiB + 1);
  {
    TransferClient wrong(io, "guess", kMiB, 4);
    absl::Status s = PullOnce(wrong, io, server.address(), id, dest.size(), dest.data());
    CHECK(!s.ok());
    INFO(s.ToString());
    CHECK(s.code() == absl::StatusCode::kPermissionDenied);
    TransferClient none(io);
    s = PullOnce(none, io, server.address(), id, dest.size(), dest.data());
    CHECK(!s.ok());
  }
  TransferClient good(io, "s3cret", kMiB, 4);
  REQUIRE(PullOnce(good, io, server.address(), id, dest.size(), dest.data()).ok());
  CHECK(dest == server.Get(id));
  server.Stop();
  CHECK(server.pins() == server.unpins());
}

TEST_CASE("Transfer: a malformed request closes only that connection", "[transfer]") {
  ServerThread server;
  ObjectId id = ObjectId::ForPut();
  server.Add(id, Pattern(7, kMiB));
  server.Start();

  // A raw client: a good hello, then a request with a bad magic.
  asio::io_context raw_io;
  tcp::socket raw(raw_io);
  raw.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), server.port()));
  std::vector<uint8_t> bytes(kTransferHelloBytes + kTransferRequestBytes, 0);
  const uint32_t magic = kTransferMagic;
  std::memcpy(bytes.data(), &magic, 4);  // token_len stays 0
  std::memcpy(bytes.data() + kTransferHelloBytes, "JUNK", 4);
  asio::write(raw, asio::buffer(bytes));
  uint8_t sink[64];
  boost::system::error_code ec;
  size_t n = raw.read_some(asio::buffer(sink), ec);  // The server hangs up, no reply.
  CHECK(n == 0);
  CHECK(ec == asio::error::eof);

  asio::io_context io;
  TransferClient client(io);
  std::vector<uint8_t> dest(kMiB);
  REQUIRE(PullOnce(client, io, server.address(), id, dest.size(), dest.data()).ok());
  CHECK(dest == server.Get(id));
}

TEST_CASE("Transfer: an unreachable server fails with Unavailable", "[transfer]") {
  asio::io_context io;
  // A port that was free a moment ago and has no listener now.
  int port;
  {
    tcp::acceptor probe(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    port = probe.local_endpoint().port();
  }
  std::string address = "127.0.0.1:" + std::to_string(port);
  TransferClient client(io);
  std::vector<uint8_t> dest(100);
  PullResult r1, r2;
  client.Pull(address, ObjectId::ForPut(), dest.size(), dest.data(), r1.Callback());
  client.Pull(address, ObjectId::ForPut(), dest.size(), dest.data(), r2.Callback());
  REQUIRE(RunUntil(io, [&] { return r1.done() && r2.done(); }));
  CHECK(r1.status->code() == absl::StatusCode::kUnavailable);
  CHECK(r2.status->code() == absl::StatusCode::kUnavailable);
  CHECK(std::string(r1.status->message()).find(address) != std::string::npos);
  CHECK(client.num_connections() == 0);

  absl::Status bad = PullOnce(client, io, "no-port-here", ObjectId::ForPut(), 1, dest.data());
  CHECK(bad.code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("Transfer: a server destroyed mid-transfer fails the pull and the next pull reconnects",
          "[transfer]") {
  ObjectId id = ObjectId::ForPut();
  std::vector<uint8_t> dest(64 * kMiB);
  asio::io_context io;
  TransferClient client(io, "", kMiB, 2);
  int port;
  {
    ServerThread server;
    server.Add(id, Pattern(8, 64 * kMiB));
    server.DestroyOnFirstPin();
    server.Start();
    port = server.port();
    PullResult r;
    client.Pull(server.address(), id, dest.size(), dest.data(), r.Callback());
    REQUIRE(RunUntil(io, [&] { return r.done(); }));
    CHECK(r.status->code() == absl::StatusCode::kUnavailable);
    CHECK(r.calls == 1);
    server.Stop();
    CHECK(server.pins() == 1);
    CHECK(server.unpins() == 1);
  }
  CHECK(client.num_connections() == 0);

  // A new server on the same port: the client opens a new connection.
  ServerThread server(/*token=*/"", port);
  server.Add(id, Pattern(8, 64 * kMiB));
  server.Start();
  REQUIRE(PullOnce(client, io, server.address(), id, dest.size(), dest.data()).ok());
  CHECK(dest == server.Get(id));
}

TEST_CASE("Transfer: destroying the client cancels its pulls", "[transfer]") {
  ServerThread server;
  ObjectId id = ObjectId::ForPut();
  server.Add(id, Pattern(9, 16 * kMiB));
  server.Start();
  asio::io_context io;
  std::vector<uint8_t> dest(16 * kMiB);
  PullResult r;
  {
    TransferClient client(io, "", kMiB, 2);
    client.Pull(server.address(), id, dest.size(), dest.data(), r.Callback());
  }
  REQUIRE(RunUntil(io, [&] { return r.done(); }));
  CHECK(r.status->code() == absl::StatusCode::kCancelled);
}

TEST_CASE("Transfer: a 256 MiB object with the default chunk and window arrives intact each time",
          "[transfer]") {
  // Invariant: with the client's defaults, every pull of a large object fills
  // the whole destination with the server's bytes (the destination is
  // poisoned before each pull), over one reused connection, and the server
  // unpins what it pinned. Throughput is the microbenchmark's business.
  constexpr uint64_t kBytes = 256 * kMiB;
  ServerThread server;
  ObjectId id = ObjectId::ForPut();
  server.Add(id, Pattern(11, kBytes));
  server.Start();

  asio::io_context io;
  TransferClient client(io);  // Default chunk size and window.
  std::vector<uint8_t> dest(kBytes);
  for (int round = 0; round < 2; ++round) {
    std::memset(dest.data(), 0xee, kBytes);
    REQUIRE(PullOnce(client, io, server.address(), id, kBytes, dest.data()).ok());
    REQUIRE(std::memcmp(dest.data(), server.Get(id).data(), kBytes) == 0);
    CHECK(client.num_connections() == 1);
  }
  server.Stop();
  CHECK(server.pins() >= 1);
  CHECK(server.pins() == server.unpins());
}

}  // namespace
}  // namespace lumen::objectstore
