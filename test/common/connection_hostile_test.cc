// Tests of lumen::Connection against hostile peers: what a peer can make a
// connection hold (doc/runtime.md, "Hostile peers"). Same harness as
// connection_test.cc: an io_context run on the test thread, no sleeps.
#include "connection_test_util.h"

#include <catch2/catch.hpp>

using namespace lumen_connection_test;  // NOLINT: the helpers of these tests


// ---------------------------------------------------------------------------
// Hostile peers: what a peer can make a connection hold (doc/runtime.md).

TEST_CASE("A header claiming a large frame does not make the connection allocate it",
          "[connection][hostile]") {
  boost::asio::io_context io;
  auto [socket, peer] = SocketAndRawPeer(io);
  auto conn = Connection::Create(std::move(socket));  // 64 MiB frames allowed
  Received got;
  StartRecording(conn, &got);
  const size_t initial = conn->read_buffer_bytes();
  // Claims 60 MiB, sends 100 bytes of it, then falls silent.
  WriteRaw(io, peer.get(), Header(60u << 20, kFrameMagic) + std::string(104, 'x'));
  REQUIRE(RunUntil(io, [&, &peer = peer] { return Unread(peer.get()) == 0; }));
  Drain(io);
  // Bound: the buffer it started with (8 KiB); never the 60 MiB claimed.
  CHECK(conn->read_buffer_bytes() == initial);
  CHECK(got.closes == 0);
  CHECK(got.frames.empty());
}

TEST_CASE("The read buffer grows with the bytes of a large frame and shrinks after it",
          "[connection][hostile]") {
  boost::asio::io_context io;
  auto [socket, peer] = SocketAndRawPeer(io);
  auto conn = Connection::Create(std::move(socket));
  Received got;
  StartRecording(conn, &got);
  std::string frame = KvPutFrame(7, 4u << 20);
  // Half the frame: the buffer holds at most twice what arrived.
  WriteRaw(io, peer.get(), std::string_view(frame).substr(0, frame.size() / 2));
  REQUIRE(RunUntil(io, [&, &peer = peer] { return Unread(peer.get()) == 0; }));
  Drain(io);
  CHECK(conn->read_buffer_bytes() <= frame.size() + 16384);
  WriteRaw(io, peer.get(), std::string_view(frame).substr(frame.size() / 2));
  REQUIRE(RunUntil(io, [&] { return got.frames.size() == 1; }));
  CHECK(IsKvPut(got.frames[0], 7, 4u << 20));
  // Another small frame: the idle connection gives the large buffer back.
  WriteRaw(io, peer.get(), KvPutFrame(8, 10));
  REQUIRE(RunUntil(io, [&] { return got.frames.size() == 2; }));
  Drain(io);
  CHECK(conn->read_buffer_bytes() <= (1u << 20));
}

TEST_CASE("Before its hello is accepted a connection takes only small frames",
          "[connection][hostile]") {
  ConnectionOptions options;
  options.max_frame_bytes_before_hello = 1024;
  boost::asio::io_context io;
  SECTION("a large first frame closes it") {
    auto [socket, peer] = SocketAndRawPeer(io);
    auto conn = Connection::Create(std::move(socket), options);
    Received got;
    StartRecording(conn, &got);
    WriteRaw(io, peer.get(), KvPutFrame(1, 4096));
    REQUIRE(RunUntil(io, [&] { return got.closes > 0; }));
    CHECK(got.frames.empty());
    CHECK(got.close_status.code() == absl::StatusCode::kResourceExhausted);
    CHECK(std::string(got.close_status.message()).find("before the hello") != std::string::npos);
  }
  SECTION("after AcceptHello the full limit applies") {
    auto [socket, peer] = SocketAndRawPeer(io);
    auto conn = Connection::Create(std::move(socket), options);
    Received got;
    conn->Start(
        [&](Connection& c, proto::Envelope::Reader msg) {
          got.frames.push_back({msg.getRequestId(), "", ""});
          c.AcceptHello();
        },
        [&](Connection&, const absl::Status& why) {
          ++got.closes;
          got.close_status = why;
        });
    CHECK_FALSE(conn->hello_accepted());
    WriteRaw(io, peer.get(), KvPutFrame(1, 10) + KvPutFrame(2, 4096));
    REQUIRE(RunUntil(io, [&] { return got.frames.size() == 2; }));
    CHECK(conn->hello_accepted());
    CHECK(got.closes == 0);
  }
}

TEST_CASE("A connection that does not say hello in time is closed", "[connection][hostile]") {
  ConnectionOptions options;
  options.max_frame_bytes_before_hello = 1024;
  options.hello_timeout = std::chrono::milliseconds(200);
  int phase_ends = 0;
  options.on_hello_phase_end = [&] { ++phase_ends; };
  boost::asio::io_context io;
  auto [socket, peer] = SocketAndRawPeer(io);
  auto conn = Connection::Create(std::move(socket), options);
  Received got;
  auto started = std::chrono::steady_clock::now();
  StartRecording(conn, &got);
  WriteRaw(io, peer.get(), Header(512, kFrameMagic));  // a frame begun, never finished
  REQUIRE(RunUntil(io, [&] { return got.closes > 0; }));
  CHECK(std::chrono::steady_clock::now() - started >= std::chrono::milliseconds(200));
  CHECK(got.close_status.code() == absl::StatusCode::kDeadlineExceeded);
  CHECK(phase_ends == 1);
}

TEST_CASE("HelloAdmission caps the connections awaiting their hello", "[connection][hostile]") {
  lumen::ServerLimits limits;
  limits.max_pending_hellos = 2;
  limits.hello_timeout = std::chrono::milliseconds(0);
  lumen::HelloAdmission admission(limits, "test");
  boost::asio::io_context io;
  std::vector<std::shared_ptr<Connection>> conns;
  std::vector<Fd> peers;
  auto admit = [&] {
    auto [socket, peer] = SocketAndRawPeer(io);
    peers.push_back(std::move(peer));
    auto conn = admission.Admit(std::move(socket));
    if (conn) conns.push_back(conn);
    return conn != nullptr;
  };
  CHECK(admit());
  CHECK(admit());
  CHECK(admission.pending() == 2);
  CHECK_FALSE(admit());  // refused: its socket is closed
  char byte;
  CHECK(::recv(peers.back().get(), &byte, 1, 0) == 0);
  conns[0]->AcceptHello();
  CHECK(admission.pending() == 1);
  CHECK(admit());
  conns[1]->Close(absl::CancelledError("test"));
  CHECK(admission.pending() == 1);
  for (auto& c : conns) c->Close(absl::CancelledError("test"));
  CHECK(admission.pending() == 0);
}

TEST_CASE("A peer that does not read its replies is throttled, then disconnected",
          "[connection][hostile]") {
  constexpr size_t kLimit = 256 << 10;
  constexpr size_t kReplyBytes = 16 << 10;
  ConnectionOptions options;
  options.max_send_queue_bytes = kLimit;
  options.send_stall_timeout = std::chrono::milliseconds(500);
  boost::asio::io_context io;
  auto [socket, peer] = SocketAndRawPeer(io);
  int sndbuf = 16 << 10;
  ::setsockopt(socket.native_handle(), SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
  ::setsockopt(peer.get(), SOL_SOCKET, SO_RCVBUF, &sndbuf, sizeof(sndbuf));
  auto conn = Connection::Create(std::move(socket), options);
  size_t handled = 0;
  size_t max_queue = 0;
  absl::Status closed_with;
  conn->Start(
      [&](Connection& c, proto::Envelope::Reader msg) {
        ++handled;
        capnp::MallocMessageBuilder reply;
        BuildKvPut(reply, msg.getRequestId(), kReplyBytes);
        c.Send(reply);
        max_queue = std::max(max_queue, c.send_queue_bytes());
      },
      [&](Connection&, const absl::Status& why) { closed_with = why; });
  // Many small requests, never reading a reply: the writer runs until the
  // connection stops reading and the socket fills, or the connection closes.
  std::string requests;
  for (uint64_t i = 1; i <= 20000; ++i) requests += KvPutFrame(i, 8);
  std::string_view rest(requests);
  auto deadline = std::chrono::steady_clock::now() + kDeadline;
  while (!rest.empty() && !conn->closed() && std::chrono::steady_clock::now() < deadline) {
    ssize_t n = ::send(peer.get(), rest.data(), rest.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) rest.remove_prefix(static_cast<size_t>(n));
    io.run_one_for(std::chrono::milliseconds(1));
  }
  REQUIRE(RunUntil(io, [&] { return conn->closed(); }));
  // Bound: never more than the limit plus one reply waiting to go out.
  CHECK(max_queue <= kLimit + kReplyBytes + 64);
  CHECK(handled < 20000);
  CHECK(closed_with.code() == absl::StatusCode::kResourceExhausted);
  CHECK(std::string(closed_with.message()).find("unread") != std::string::npos);
}

TEST_CASE("A throttled peer that reads again is served again", "[connection][hostile]") {
  constexpr size_t kLimit = 64 << 10;
  ConnectionOptions options;
  options.max_send_queue_bytes = kLimit;
  options.send_stall_timeout = std::chrono::seconds(60);
  boost::asio::io_context io;
  auto [socket, peer] = SocketAndRawPeer(io);
  auto conn = Connection::Create(std::move(socket), options);
  size_t handled = 0;
  bool paused_seen = false;
  conn->Start(
      [&](Connection& c, proto::Envelope::Reader msg) {
        ++handled;
        capnp::MallocMessageBuilder reply;
        BuildKvPut(reply, msg.getRequestId(), 8 << 10);
        c.Send(reply);
      },
      [&](Connection&, const absl::Status&) {});
  constexpr uint64_t kRequests = 2000;  // 2000 x 8 KiB of replies: far over the limit
  std::string requests;
  for (uint64_t i = 1; i <= kRequests; ++i) requests += KvPutFrame(i, 8);
  std::string_view rest(requests);
  size_t read_back = 0;
  char buf[65536];
  auto deadline = std::chrono::steady_clock::now() + kDeadline;
  // Phase 1: send without reading until the connection pauses.
  while (!paused_seen && std::chrono::steady_clock::now() < deadline) {
    if (!rest.empty()) {
      ssize_t n = ::send(peer.get(), rest.data(), rest.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) rest.remove_prefix(static_cast<size_t>(n));
    }
    io.run_one_for(std::chrono::milliseconds(1));
    paused_seen = conn->reading_paused();
  }
  REQUIRE(paused_seen);
  // Phase 2: read everything; every request gets answered.
  while (handled < kRequests && std::chrono::steady_clock::now() < deadline) {
    if (!rest.empty()) {
      ssize_t n = ::send(peer.get(), rest.data(), rest.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) rest.remove_prefix(static_cast<size_t>(n));
    }
    ssize_t n = ::recv(peer.get(), buf, sizeof(buf), MSG_DONTWAIT);
    if (n > 0) read_back += static_cast<size_t>(n);
    io.run_one_for(std::chrono::milliseconds(1));
  }
  CHECK(handled == kRequests);
  CHECK(read_back > 0);  // the peer's reads are what resumed the connection
  CHECK_FALSE(conn->closed());
}

TEST_CASE("ConstantTimeEquals compares secrets", "[connection]") {
  CHECK(lumen::ConstantTimeEquals("secret-token", "secret-token"));
  CHECK_FALSE(lumen::ConstantTimeEquals("secret-token", "secret-tokeN"));
  CHECK_FALSE(lumen::ConstantTimeEquals("secret-token", "secret"));
  CHECK_FALSE(lumen::ConstantTimeEquals("", "x"));
  CHECK(lumen::ConstantTimeEquals("", ""));
}

TEST_CASE("DescribePeer names a Unix peer by its pid", "[connection]") {
  auto [a, b] = RawPair();
  CHECK(lumen::DescribePeer(a.get()) ==
        absl::StrCat("unix socket (pid ", ::getpid(), ", uid ", ::getuid(), ")"));
  CHECK(lumen::DescribePeer(-1) == "unknown peer");
}

TEST_CASE("RateLimiter lets a few lines through per period and counts the rest", "[logging]") {
  lumen::logging::RateLimiter limiter(3, std::chrono::hours(1));
  uint64_t suppressed = 99;
  int allowed = 0;
  for (int i = 0; i < 100; ++i) allowed += limiter.Allow(&suppressed) ? 1 : 0;
  CHECK(allowed == 3);
  CHECK(suppressed == 0);  // the last allowed line came before any refusal

  lumen::logging::RateLimiter short_period(1, std::chrono::milliseconds(20));
  REQUIRE(short_period.Allow(&suppressed));
  int refused = 0;
  // Refused until the period passes; then allowed, reporting how many were refused.
  bool again = false;
  auto deadline = std::chrono::steady_clock::now() + kDeadline;
  while (!again && std::chrono::steady_clock::now() < deadline) {
    again = short_period.Allow(&suppressed);
    if (!again) ++refused;
  }
  REQUIRE(again);
  CHECK(suppressed == static_cast<uint64_t>(refused));
}

TEST_CASE("A peer that reads slowly but steadily is not disconnected", "[connection][hostile]") {
  // One 1 MiB reply, far over the 32 KiB limit, read 2 KiB at a time: it takes
  // longer than the stall time to go out, but every write makes progress.
  ConnectionOptions options;
  options.max_send_queue_bytes = 32 << 10;
  options.send_stall_timeout = std::chrono::milliseconds(300);
  boost::asio::io_context io;
  auto [socket, peer] = SocketAndRawPeer(io);
  int small = 8 << 10;
  ::setsockopt(socket.native_handle(), SOL_SOCKET, SO_SNDBUF, &small, sizeof(small));
  ::setsockopt(peer.get(), SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
  auto conn = Connection::Create(std::move(socket), options);
  conn->Start(
      [&](Connection& c, proto::Envelope::Reader msg) {
        capnp::MallocMessageBuilder reply;
        BuildKvPut(reply, msg.getRequestId(), 1 << 20);
        c.Send(reply);
      },
      [&](Connection&, const absl::Status&) {});
  WriteRaw(io, peer.get(), KvPutFrame(1, 8));
  std::string expected = KvPutFrame(1, 1 << 20);
  std::string got;
  char buf[2048];
  bool paused_seen = false;
  auto start = std::chrono::steady_clock::now();
  auto last_read = start;
  while (got.size() < expected.size() && !conn->closed() &&
         std::chrono::steady_clock::now() - start < kDeadline) {
    // Paced: 2 KiB every 2 ms (about 1 MB/s), so the reply takes about a second.
    if (std::chrono::steady_clock::now() - last_read >= std::chrono::milliseconds(2)) {
      last_read = std::chrono::steady_clock::now();
      ssize_t n = ::recv(peer.get(), buf, sizeof(buf), MSG_DONTWAIT);
      if (n > 0) got.append(buf, static_cast<size_t>(n));
    }
    io.run_one_for(std::chrono::milliseconds(1));
    paused_seen |= conn->reading_paused();
  }
  CHECK(paused_seen);
  CHECK_FALSE(conn->closed());
  CHECK(got == expected);
  // It took longer than the stall time, so a deadline on time over the limit
  // (rather than time without progress) would have closed it.
  CHECK(std::chrono::steady_clock::now() - start > std::chrono::milliseconds(300));
}

// ---------------------------------------------------------------------------
// The whole-frame walk (DecodeFrame) and runtime peers (issue 13).

namespace {

uint64_t StructPointerWord(int32_t offset_words, uint16_t data_words, uint16_t pointers) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(offset_words) << 2)) |
         (static_cast<uint64_t>(data_words) << 32) | (static_cast<uint64_t>(pointers) << 48);
}

// One segment holding `segment`, framed.
std::string OneSegmentFrame(const std::vector<uint64_t>& segment) {
  return RawFrame(Words({static_cast<uint64_t>(segment.size()) << 32}) + Words(segment));
}

// A struct whose two pointers both point to itself.
std::string CyclicFrame() {
  return OneSegmentFrame({StructPointerWord(0, 0, 2), StructPointerWord(-1, 0, 2),
                          StructPointerWord(-2, 0, 2)});
}

// A chain of `depth` structs, each with one pointer to the next.
std::string DeepFrame(int depth) {
  std::vector<uint64_t> segment;
  for (int i = 0; i < depth; ++i) segment.push_back(StructPointerWord(0, 0, 1));
  segment.push_back(0);
  return OneSegmentFrame(segment);
}

}  // namespace

TEST_CASE("A runtime peer's frames skip the whole-frame walk only after the hello, and what the handler reads is still checked",
          "[connection][hostile]") {
  // Invariant: with RuntimePeerConnectionOptions, a cyclic or 1,000-deep frame
  // is refused before its handler runs while the hello is pending; after it
  // the handler sees the frame, and reading it whole (as a handler that
  // follows every pointer would) still fails within the traversal and nesting
  // limits and closes the connection as malformed. With the daemons' default
  // options such a frame never reaches the handler, hello or not.
  struct Bad {
    const char* name;
    std::string frame;
  };
  const std::vector<Bad> bads = {{"cyclic pointers", CyclicFrame()}, {"nesting 1,000 deep", DeepFrame(1000)}};
  for (const Bad& bad : bads) {
    for (bool runtime_peer : {true, false}) {
      for (bool after_hello : {true, false}) {
        INFO(bad.name << (runtime_peer ? ", runtime peer" : ", daemon default")
                      << (after_hello ? ", after the hello" : ", before the hello"));
        ConnectionOptions options =
            runtime_peer ? lumen::RuntimePeerConnectionOptions() : ConnectionOptions{};
        options.max_frame_bytes_before_hello = 16u << 10;  // the daemons' limit
        boost::asio::io_context io;
        auto [socket, peer] = SocketAndRawPeer(io);
        auto conn = Connection::Create(std::move(socket), options);
        int frames = 0;
        int closes = 0;
        absl::Status why;
        conn->Start(
            [&](Connection& c, proto::Envelope::Reader msg) {
              ++frames;
              if (frames == 1 && after_hello) {
                c.AcceptHello();
                return;
              }
              // Follows every pointer of the message.
              capnp::AnyStruct::Reader(msg).totalSize();
            },
            [&](Connection&, const absl::Status& s) {
              ++closes;
              why = s;
            });
        std::string bytes = after_hello ? KvPutFrame(1, 10) + bad.frame : bad.frame;
        WriteRaw(io, peer.get(), bytes);
        REQUIRE(RunUntil(io, [&] { return closes > 0; }));
        CHECK(why.code() == absl::StatusCode::kInvalidArgument);
        CHECK(std::string(why.message()).find("malformed message") != std::string::npos);
        // The handler saw the bad frame only on a runtime peer after its hello.
        CHECK(frames == (after_hello ? 1 : 0) + (runtime_peer && after_hello ? 1 : 0));
      }
    }
  }
}
