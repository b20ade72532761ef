// Tests of the frame format and of lumen::Connection (lumen/common/connection.h).
//
// Every Connection test runs a boost::asio::io_context on the test thread over a
// connected pair of Unix sockets, and drives it until a condition holds (with a
// deadline) instead of sleeping.
#include "connection_test_util.h"

#include <poll.h>

#include <catch2/catch.hpp>

namespace {

using namespace lumen_connection_test;  // NOLINT: the helpers of these tests

TEST_CASE("AppendFrame writes a little-endian header and the flat array", "[frame]") {
  capnp::MallocMessageBuilder message;
  BuildKvPut(message, 7, 1000);
  std::string frame;
  lumen::AppendFrame(message, &frame);

  auto flat = capnp::messageToFlatArray(message);
  auto flat_bytes = flat.asBytes();
  REQUIRE(frame.size() == kFrameHeaderBytes + flat_bytes.size());
  const auto* h = reinterpret_cast<const uint8_t*>(frame.data());
  uint32_t length = h[0] | (h[1] << 8) | (h[2] << 16) | (static_cast<uint32_t>(h[3]) << 24);
  CHECK(length == flat_bytes.size());
  CHECK(length % 8 == 0);
  // The magic 0x4c4d4e46, little-endian: "FNML" on the wire.
  CHECK(frame.substr(4, 4) == "FNML");
  CHECK(std::memcmp(frame.data() + kFrameHeaderBytes, flat_bytes.begin(), flat_bytes.size()) == 0);

  auto parsed = lumen::ParseFrameHeader(h, 64u << 20);
  REQUIRE(parsed.ok());
  CHECK(*parsed == length);
}

TEST_CASE("AppendFrame appends, leaving what is already in the buffer", "[frame]") {
  std::string out = "prefix!!";
  capnp::MallocMessageBuilder first, second;
  BuildKvPut(first, 1, 3);
  BuildKvPut(second, 2, 300);
  lumen::AppendFrame(first, &out);
  size_t first_end = out.size();
  lumen::AppendFrame(second, &out);
  REQUIRE(out.substr(0, 8) == "prefix!!");

  // Walk the two frames and decode them.
  std::vector<std::string> keys;
  size_t pos = 8;
  while (pos < out.size()) {
    auto len = lumen::ParseFrameHeader(reinterpret_cast<const uint8_t*>(out.data() + pos), 1 << 20);
    REQUIRE(len.ok());
    REQUIRE(pos + kFrameHeaderBytes + *len <= out.size());
    std::vector<capnp::word> words(*len / sizeof(capnp::word));
    std::memcpy(words.data(), out.data() + pos + kFrameHeaderBytes, *len);
    capnp::FlatArrayMessageReader reader(kj::arrayPtr(words.data(), words.size()));
    auto env = reader.getRoot<proto::Envelope>();
    REQUIRE(env.isKvPut());
    keys.push_back(env.getKvPut().getKey().cStr());
    pos += kFrameHeaderBytes + *len;
    if (keys.size() == 1) CHECK(pos == first_end);
  }
  CHECK(pos == out.size());
  CHECK(keys == std::vector<std::string>{"key-1", "key-2"});
}

TEST_CASE("ParseFrameHeader accepts a length up to the limit", "[frame]") {
  std::string h = Header(4096, kFrameMagic);
  auto at_limit = lumen::ParseFrameHeader(reinterpret_cast<const uint8_t*>(h.data()), 4096);
  REQUIRE(at_limit.ok());
  CHECK(*at_limit == 4096);
  h = Header(8, kFrameMagic);
  auto smallest = lumen::ParseFrameHeader(reinterpret_cast<const uint8_t*>(h.data()), 4096);
  REQUIRE(smallest.ok());
  CHECK(*smallest == 8);
}

TEST_CASE("ParseFrameHeader rejects bad headers", "[frame]") {
  auto parse = [](uint32_t length, uint32_t magic, size_t limit) {
    std::string h = Header(length, magic);
    return lumen::ParseFrameHeader(reinterpret_cast<const uint8_t*>(h.data()), limit).status();
  };
  SECTION("bad magic") {
    auto s = parse(64, 0xdeadbeef, 1024);
    CHECK(s.code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(s.message()), Catch::Contains("bad frame header"));
  }
  SECTION("byte-swapped magic") {
    auto s = parse(64, __builtin_bswap32(kFrameMagic), 1024);
    CHECK(s.code() == absl::StatusCode::kInvalidArgument);
  }
  SECTION("bad magic wins over a bad length") {
    CHECK(parse(0xFFFFFFF0u, 0, 1024).code() == absl::StatusCode::kInvalidArgument);
  }
  SECTION("length over the limit") {
    auto s = parse(1032, kFrameMagic, 1024);
    CHECK(s.code() == absl::StatusCode::kResourceExhausted);
    CHECK_THAT(std::string(s.message()), Catch::Contains("1032") && Catch::Contains("1024"));
    CHECK(parse(0xFFFFFFF8u, kFrameMagic, 64u << 20).code() == absl::StatusCode::kResourceExhausted);
  }
  SECTION("zero length") {
    auto s = parse(0, kFrameMagic, 1024);
    CHECK(s.code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(s.message()), Catch::Contains("multiple of 8"));
  }
  SECTION("length not a multiple of 8") {
    for (uint32_t len : {1u, 4u, 7u, 12u, 1023u}) {
      INFO("length " << len);
      CHECK(parse(len, kFrameMagic, 1024).code() == absl::StatusCode::kInvalidArgument);
    }
  }
}

// ---------------------------------------------------------------------------
// Blocking frame I/O

TEST_CASE("Blocking frame I/O round-trips a 1 MiB envelope", "[blocking]") {
  auto [a, b] = RawPair();
  constexpr size_t kValue = 1 << 20;  // far more than a socket buffer: the write blocks
  absl::Status write_status;
  std::thread writer([&, fd = a.get()] {
    capnp::MallocMessageBuilder message;
    BuildKvPut(message, 42, kValue);
    write_status = lumen::WriteFrameBlocking(fd, message);
  });
  std::vector<capnp::word> words;
  absl::Status read_status = lumen::ReadFrameBlocking(b.get(), 64u << 20, &words);
  writer.join();
  REQUIRE(write_status.ok());
  REQUIRE(read_status.ok());
  capnp::ReaderOptions options;
  options.traversalLimitInWords = words.size() * 2;
  capnp::FlatArrayMessageReader reader(kj::arrayPtr(words.data(), words.size()), options);
  auto env = reader.getRoot<proto::Envelope>();
  REQUIRE(env.isKvPut());
  CHECK(env.getRequestId() == 42);
  CHECK(std::string(env.getKvPut().getKey().cStr()) == "key-42");
  auto v = env.getKvPut().getValue();
  CHECK(std::string(reinterpret_cast<const char*>(v.begin()), v.size()) == Pattern(42, kValue));
  CHECK(Unread(b.get()) == 0);  // read exactly one frame
}

TEST_CASE("ReadFrameBlocking refuses a frame over its limit", "[blocking]") {
  auto [a, b] = RawPair();
  std::string frame = KvPutFrame(5, 4000);
  REQUIRE(::write(a.get(), frame.data(), frame.size()) == static_cast<ssize_t>(frame.size()));
  std::vector<capnp::word> words(3);
  auto s = lumen::ReadFrameBlocking(b.get(), 1024, &words);
  CHECK(s.code() == absl::StatusCode::kResourceExhausted);
  CHECK(words.size() == 3);  // nothing allocated for the refused payload
  // It consumed the header only; the payload was not read.
  CHECK(Unread(b.get()) == static_cast<int>(frame.size() - kFrameHeaderBytes));
}

TEST_CASE("ReadFrameBlocking rejects a bad header and a short frame", "[blocking]") {
  auto [a, b] = RawPair();
  std::vector<capnp::word> words;
  SECTION("bad magic") {
    std::string bad = Header(8, 0x12345678) + std::string(8, '\0');
    REQUIRE(::write(a.get(), bad.data(), bad.size()) == static_cast<ssize_t>(bad.size()));
    CHECK(lumen::ReadFrameBlocking(b.get(), 1024, &words).code() ==
          absl::StatusCode::kInvalidArgument);
  }
  SECTION("peer closes in the middle of the payload") {
    std::string frame = KvPutFrame(9, 100);
    REQUIRE(::write(a.get(), frame.data(), frame.size() - 8) ==
            static_cast<ssize_t>(frame.size() - 8));
    a.Reset();
    CHECK(lumen::ReadFrameBlocking(b.get(), 1024, &words).code() ==
          absl::StatusCode::kUnavailable);
  }
  SECTION("peer closes in the middle of the header") {
    REQUIRE(::write(a.get(), "FNM", 3) == 3);
    a.Reset();
    CHECK(lumen::ReadFrameBlocking(b.get(), 1024, &words).code() ==
          absl::StatusCode::kUnavailable);
  }
}

// ---------------------------------------------------------------------------
// Connection

TEST_CASE("Connection delivers many back-to-back frames in order", "[connection]") {
  boost::asio::io_context io;
  auto [sa, sb] = SocketPair(io);
  auto sender = Connection::Create(std::move(sa));
  auto receiver = Connection::Create(std::move(sb));
  Received got;
  Received sender_side;
  StartRecording(receiver, &got);
  StartRecording(sender, &sender_side);

  // Mostly tiny frames, a few far larger than the 64 KiB read buffer (which must
  // grow), some split between Send and SendFramed.
  constexpr uint64_t kFrames = 10000;
  auto value_size = [](uint64_t i) -> size_t {
    if (i == 2500) return 100 << 10;
    if (i == 5000) return 1 << 20;
    if (i == 7500) return 5 << 20;
    if (i == 7501) return 70 << 10;
    return i % 17;
  };
  for (uint64_t i = 1; i <= kFrames; ++i) {
    if (i % 3 == 0) {
      sender->SendFramed(KvPutFrame(i, value_size(i)));
    } else {
      capnp::MallocMessageBuilder message;
      BuildKvPut(message, i, value_size(i));
      sender->Send(message);
    }
    // Let some writes complete while later frames are still being queued.
    if (i % 1000 == 0) Drain(io);
  }
  REQUIRE(RunUntil(io, [&] { return got.frames.size() >= kFrames || got.closes > 0; }));
  REQUIRE(got.closes == 0);
  REQUIRE(got.frames.size() == kFrames);
  size_t bad = 0;
  for (uint64_t i = 1; i <= kFrames; ++i) {
    if (!IsKvPut(got.frames[i - 1], i, value_size(i))) {
      if (bad++ < 5) FAIL_CHECK("frame " << i << " arrived as request " << got.frames[i - 1].request_id);
    }
  }
  CHECK(bad == 0);
  CHECK(sender_side.closes == 0);
  CHECK(sender_side.frames.empty());
}

TEST_CASE("Connection handles frames in both directions at once", "[connection]") {
  boost::asio::io_context io;
  auto [sa, sb] = SocketPair(io);
  auto a = Connection::Create(std::move(sa));
  auto b = Connection::Create(std::move(sb));
  // Each side echoes a frame back with requestId + 1 until it reaches 200.
  std::vector<uint64_t> seen;
  auto echo = [&seen](Connection& c, proto::Envelope::Reader msg) {
    seen.push_back(msg.getRequestId());
    if (msg.getRequestId() >= 200) return;
    capnp::MallocMessageBuilder out;
    BuildKvPut(out, msg.getRequestId() + 1, 20000);
    c.Send(out);
  };
  int closes = 0;
  a->Start(echo, [&](Connection&, const absl::Status&) { ++closes; });
  b->Start(echo, [&](Connection&, const absl::Status&) { ++closes; });
  capnp::MallocMessageBuilder first;
  BuildKvPut(first, 1, 20000);
  a->Send(first);
  REQUIRE(RunUntil(io, [&] { return seen.size() >= 200 || closes > 0; }));
  CHECK(closes == 0);
  REQUIRE(seen.size() == 200);
  for (size_t i = 0; i < seen.size(); ++i) CHECK(seen[i] == i + 1);
}

TEST_CASE("Connection reassembles frames split across writes", "[connection]") {
  boost::asio::io_context io;
  auto [socket, peer] = SocketAndRawPeer(io);
  auto conn = Connection::Create(std::move(socket));
  Received got;
  StartRecording(conn, &got);
  int conn_fd = conn->socket().native_handle();

  SECTION("one byte at a time") {
    std::string bytes = KvPutFrame(1, 5) + KvPutFrame(2, 11);
    size_t first_end = KvPutFrame(1, 5).size();
    for (size_t i = 0; i < bytes.size(); ++i) {
      REQUIRE(::write(peer.get(), bytes.data() + i, 1) == 1);
      // The connection takes the byte before the next one is written.
      REQUIRE(RunUntil(io, [&] { return Unread(conn_fd) == 0; }));
      Drain(io);
      INFO("after byte " << i + 1 << " of " << bytes.size());
      REQUIRE(got.closes == 0);
      REQUIRE(got.frames.size() == (i + 1 < first_end ? 0u : i + 1 < bytes.size() ? 1u : 2u));
    }
    CHECK(IsKvPut(got.frames[0], 1, 5));
    CHECK(IsKvPut(got.frames[1], 2, 11));
  }

  SECTION("a large frame in odd-sized pieces, straddling the next frame") {
    std::string bytes = KvPutFrame(1, 300 << 10) + KvPutFrame(2, 3) + KvPutFrame(3, 150 << 10);
    constexpr size_t kPiece = 4093;
    for (size_t pos = 0; pos < bytes.size(); pos += kPiece) {
      WriteRaw(io, peer.get(), std::string_view(bytes).substr(pos, kPiece));
      REQUIRE(RunUntil(io, [&] { return Unread(conn_fd) == 0; }));
      Drain(io);
    }
    REQUIRE(RunUntil(io, [&] { return got.frames.size() >= 3 || got.closes > 0; }));
    REQUIRE(got.closes == 0);
    REQUIRE(got.frames.size() == 3);
    CHECK(IsKvPut(got.frames[0], 1, 300 << 10));
    CHECK(IsKvPut(got.frames[1], 2, 3));
    CHECK(IsKvPut(got.frames[2], 3, 150 << 10));
  }
}

// Frames after the bad one must not be delivered either.
void ExpectClosedByBadFrame(const std::string& bad, absl::StatusCode code,
                            const std::string& reason, ConnectionOptions options = {}) {
  boost::asio::io_context io;
  auto [socket, peer] = SocketAndRawPeer(io);
  auto conn = Connection::Create(std::move(socket), options);
  Received got;
  StartRecording(conn, &got);
  WriteRaw(io, peer.get(), KvPutFrame(1, 10) + bad + KvPutFrame(3, 10));
  REQUIRE(RunUntil(io, [&] { return got.closes > 0; }));
  Drain(io);
  CHECK(got.closes == 1);
  CHECK(got.close_status.code() == code);
  CHECK_THAT(std::string(got.close_status.message()), Catch::Contains(reason));
  REQUIRE(got.frames.size() == 1);
  CHECK(IsKvPut(got.frames[0], 1, 10));
  CHECK(conn->closed());
  CHECK_FALSE(conn->socket().is_open());
  // The socket is closed: the peer sees end-of-file (or a reset).
  char c;
  ssize_t n;
  REQUIRE(RunUntil(io, [&, &peer = peer] {
    n = ::read(peer.get(), &c, 1);
    return n == 0 || (n < 0 && errno != EAGAIN);
  }));
}

TEST_CASE("Connection closes on a bad frame and delivers nothing after it", "[connection]") {
  SECTION("bad magic") {
    ExpectClosedByBadFrame(Header(16, 0x46454542) + std::string(16, 'x'),
                           absl::StatusCode::kInvalidArgument, "bad frame header");
  }
  SECTION("length over max_frame_bytes") {
    ConnectionOptions options;
    options.max_frame_bytes = 4096;
    ExpectClosedByBadFrame(KvPutFrame(2, 5000), absl::StatusCode::kResourceExhausted,
                           "exceeds the limit", options);
  }
  SECTION("a header claiming more than the default 64 MiB") {
    // Only the header is sent: the connection must not wait for (or allocate) 4 GiB.
    ExpectClosedByBadFrame(Header(0xFFFFFFF8u, kFrameMagic), absl::StatusCode::kResourceExhausted,
                           "exceeds the limit");
  }
  SECTION("zero length") {
    ExpectClosedByBadFrame(Header(0, kFrameMagic), absl::StatusCode::kInvalidArgument,
                           "multiple of 8");
  }
  SECTION("length not a multiple of 8") {
    ExpectClosedByBadFrame(Header(20, kFrameMagic) + std::string(20, '\0'),
                           absl::StatusCode::kInvalidArgument, "multiple of 8");
  }
  SECTION("a segment table claiming a huge segment count") {
    // Segment count - 1 = 0x00FFFFFF, in a 2-word message.
    ExpectClosedByBadFrame(RawFrame(Words({0x00FFFFFFull, 0})),
                           absl::StatusCode::kInvalidArgument, "malformed message");
  }
  SECTION("a segment larger than the frame") {
    // One segment of 1000 words, in a 2-word message.
    ExpectClosedByBadFrame(RawFrame(Words({1000ull << 32, 0})),
                           absl::StatusCode::kInvalidArgument, "malformed message");
  }
  SECTION("a root pointer out of bounds") {
    // One segment of one word: a struct pointer 1000 words past the segment's end.
    uint64_t root = (1000ull << 2) | (1ull << 32);
    ExpectClosedByBadFrame(RawFrame(Words({1ull << 32, root})),
                           absl::StatusCode::kInvalidArgument, "malformed message");
  }
}

TEST_CASE("Connection accepts a frame of exactly max_frame_bytes", "[connection]") {
  std::string frame = KvPutFrame(1, 1000);
  ConnectionOptions options;
  options.max_frame_bytes = frame.size() - kFrameHeaderBytes;
  boost::asio::io_context io;
  auto [socket, peer] = SocketAndRawPeer(io);
  auto conn = Connection::Create(std::move(socket), options);
  Received got;
  StartRecording(conn, &got);
  WriteRaw(io, peer.get(), frame + KvPutFrame(2, 1008));  // the second is 8 bytes over
  REQUIRE(RunUntil(io, [&] { return got.closes > 0; }));
  REQUIRE(got.frames.size() == 1);
  CHECK(IsKvPut(got.frames[0], 1, 1000));
  CHECK(got.close_status.code() == absl::StatusCode::kResourceExhausted);
}

// A kvPut whose value is a list of `elements` zero-sized structs in an
// INLINE_COMPOSITE list (declared as List(NodeStats) through `nodes`): a few words
// on the wire that a reader must count as `elements` words of traversal.
std::string AmplifiedNodesFrame(uint32_t elements) {
  auto schema = capnp::Schema::from<proto::Envelope>();
  auto node = schema.getProto().getStruct();
  uint16_t data_words = node.getDataWordCount();
  uint16_t pointers = node.getPointerCount();
  auto field = schema.getFieldByName("nodes").getProto();
  REQUIRE(field.isSlot());
  uint32_t pointer_slot = field.getSlot().getOffset();
  uint16_t discriminant_offset = node.getDiscriminantOffset();  // in 16-bit units
  uint16_t discriminant = field.getDiscriminantValue();

  std::vector<uint64_t> seg;
  seg.push_back(0 | (uint64_t{data_words} << 32) | (uint64_t{pointers} << 48));  // root
  std::vector<uint64_t> data(data_words, 0);
  data[discriminant_offset / 4] |= uint64_t{discriminant} << (16 * (discriminant_offset % 4));
  seg.insert(seg.end(), data.begin(), data.end());
  size_t pointer_base = seg.size();
  seg.resize(seg.size() + pointers, 0);
  size_t list_pos = pointer_base + pointer_slot;
  size_t tag_pos = seg.size();
  // List pointer: offset to the tag, element size 7 (INLINE_COMPOSITE), 0 words.
  int64_t offset = static_cast<int64_t>(tag_pos) - static_cast<int64_t>(list_pos) - 1;
  seg[list_pos] = 1 | (static_cast<uint64_t>(offset) << 2) | (7ull << 32);
  // Tag: element count in the offset field; structs of 0 data words, 0 pointers.
  seg.push_back(uint64_t{elements} << 2);

  std::vector<uint64_t> message;
  message.push_back(static_cast<uint64_t>(seg.size()) << 32);  // 1 segment
  message.insert(message.end(), seg.begin(), seg.end());
  return RawFrame(Words(message));
}

TEST_CASE("Connection bounds traversal by the frame's size", "[connection]") {
  constexpr uint32_t kElements = 1000000;
  std::string frame = AmplifiedNodesFrame(kElements);
  REQUIRE(frame.size() < 200);

  // The message is valid: Cap'n Proto's default limits read a million nodes.
  {
    std::vector<capnp::word> words((frame.size() - kFrameHeaderBytes) / sizeof(capnp::word));
    std::memcpy(words.data(), frame.data() + kFrameHeaderBytes, frame.size() - kFrameHeaderBytes);
    capnp::FlatArrayMessageReader reader(kj::arrayPtr(words.data(), words.size()));
    auto env = reader.getRoot<proto::Envelope>();
    REQUIRE(env.isNodes());
    REQUIRE(env.getNodes().size() == kElements);
  }

  boost::asio::io_context io;
  auto [socket, peer] = SocketAndRawPeer(io);
  auto conn = Connection::Create(std::move(socket));
  std::optional<size_t> nodes_seen;
  int closes = 0;
  absl::Status why;
  conn->Start([&](Connection&, proto::Envelope::Reader msg) { nodes_seen = msg.getNodes().size(); },
              [&](Connection&, const absl::Status& s) {
                ++closes;
                why = s;
              });
  WriteRaw(io, peer.get(), frame);
  REQUIRE(RunUntil(io, [&] { return closes > 0; }));
  CHECK_FALSE(nodes_seen.has_value());
  CHECK(why.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(why.message()),
             Catch::Contains("malformed message") && Catch::Contains("traversal limit"));
}

TEST_CASE("Connection applies ConnectionOptions::nesting_limit", "[connection]") {
  // Envelope -> kvPut -> key is three levels: two structs and a text (the
  // whole-message check counts every pointer it follows).
  auto run = [](int nesting_limit, std::string* key, absl::Status* why) {
    ConnectionOptions options;
    options.nesting_limit = nesting_limit;
    boost::asio::io_context io;
    auto [socket, peer] = SocketAndRawPeer(io);
    auto conn = Connection::Create(std::move(socket), options);
    int frames = 0;
    conn->Start(
        [&](Connection&, proto::Envelope::Reader msg) {
          *key = msg.getKvPut().getKey().cStr();
          ++frames;
        },
        [&](Connection&, const absl::Status& s) { *why = s; });
    WriteRaw(io, peer.get(), KvPutFrame(1, 4));
    REQUIRE(RunUntil(io, [&] { return frames > 0 || !why->ok(); }));
  };
  std::string key;
  absl::Status why;
  run(3, &key, &why);
  CHECK(why.ok());
  CHECK(key == "key-1");

  key.clear();
  why = absl::OkStatus();
  run(2, &key, &why);
  CHECK(key.empty());
  CHECK(why.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(why.message()), Catch::Contains("malformed message"));
}

TEST_CASE("An exception from the frame handler closes the connection", "[connection]") {
  boost::asio::io_context io;
  auto [socket, peer] = SocketAndRawPeer(io);
  auto conn = Connection::Create(std::move(socket));
  int frames = 0;
  int closes = 0;
  absl::Status why;
  conn->Start(
      [&](Connection&, proto::Envelope::Reader msg) {
        ++frames;
        if (msg.getRequestId() == 2) throw std::runtime_error("handler refused request 2");
      },
      [&](Connection&, const absl::Status& s) {
        ++closes;
        why = s;
      });
  WriteRaw(io, peer.get(), KvPutFrame(1, 1) + KvPutFrame(2, 1) + KvPutFrame(3, 1));
  REQUIRE(RunUntil(io, [&] { return closes > 0; }));
  Drain(io);
  CHECK(frames == 2);  // the third frame is not delivered
  CHECK(closes == 1);
  CHECK(why.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(why.message()), Catch::Contains("handler refused request 2"));
}

TEST_CASE("A peer that goes away closes the connection as Unavailable or mid-frame as DataLoss", "[connection]") {
  boost::asio::io_context io;
  SECTION("after whole frames, which are delivered first") {
    auto [sa, sb] = SocketPair(io);
    auto sender = Connection::Create(std::move(sa));
    auto receiver = Connection::Create(std::move(sb));
    Received got, sent;
    StartRecording(receiver, &got);
    StartRecording(sender, &sent);
    for (uint64_t i = 1; i <= 3; ++i) {
      capnp::MallocMessageBuilder m;
      BuildKvPut(m, i, 100);
      sender->Send(m);
    }
    // Let the writes finish, then hang up.
    REQUIRE(RunUntil(io, [&] { return got.frames.size() == 3; }));
    sender->Close(absl::CancelledError("sender is done"));
    REQUIRE(RunUntil(io, [&] { return got.closes > 0; }));
    CHECK(got.close_status.code() == absl::StatusCode::kUnavailable);
    CHECK(got.frames.size() == 3);
    // The side that called Close() gets its own reason, once.
    sender->Close(absl::InternalError("second close is ignored"));
    Drain(io);
    CHECK(sent.closes == 1);
    CHECK(sent.close_status.code() == absl::StatusCode::kCancelled);
    CHECK(sent.close_status.message() == "sender is done");
    CHECK(got.closes == 1);
  }
  SECTION("in the middle of a frame, which is dropped") {
    auto [socket, peer] = SocketAndRawPeer(io);
    auto conn = Connection::Create(std::move(socket));
    Received got;
    StartRecording(conn, &got);
    std::string frame = KvPutFrame(1, 100);
    WriteRaw(io, peer.get(), std::string_view(frame).substr(0, frame.size() - 1));
    REQUIRE(RunUntil(io, [&] { return Unread(conn->socket().native_handle()) == 0; }));
    peer.Reset();
    REQUIRE(RunUntil(io, [&] { return got.closes > 0; }));
    // DataLoss, not a plain hang-up: the daemons log it.
    CHECK(got.close_status.code() == absl::StatusCode::kDataLoss);
    CHECK_THAT(std::string(got.close_status.message()),
               Catch::Contains("in the middle of a frame (" + std::to_string(frame.size() - 1) +
                               " of " + std::to_string(frame.size()) + " bytes)"));
    CHECK(got.frames.empty());
  }
}

TEST_CASE("Send after Close is dropped", "[connection]") {
  boost::asio::io_context io;
  auto [socket, peer] = SocketAndRawPeer(io);
  auto conn = Connection::Create(std::move(socket));
  Received got;
  StartRecording(conn, &got);
  conn->Close(absl::CancelledError("bye"));
  capnp::MallocMessageBuilder m;
  BuildKvPut(m, 1, 10);
  conn->Send(m);
  conn->SendFramed(KvPutFrame(2, 10));
  Drain(io);
  CHECK(got.closes == 1);
  // The peer reads end-of-file and no bytes.
  char buf[64];
  ssize_t n = -1;
  REQUIRE(RunUntil(io, [&, &peer = peer] {
    n = ::read(peer.get(), buf, sizeof(buf));
    return !(n < 0 && errno == EAGAIN);
  }));
  CHECK(n == 0);
}

TEST_CASE("SendBeforeClose writes a large frame whole while the peer reads, gives up past its limit",
          "[connection]") {
  // Invariant: the frame leaves whole (several times the socket's buffer) when
  // the peer reads; with a peer that never reads it returns false once the
  // limit passed, queueing nothing; with something already queued it sends
  // nothing.
  boost::asio::io_context io;
  auto [socket, peer] = SocketAndRawPeer(io);
  auto conn = Connection::Create(std::move(socket));
  const std::string frame = KvPutFrame(1, 2 << 20);
  std::string got;
  std::thread reader([&, fd = peer.get()] {
    char buf[1 << 16];
    while (got.size() < frame.size()) {
      pollfd in{.fd = fd, .events = POLLIN, .revents = 0};
      if (::poll(&in, 1, 20000) <= 0) return;
      ssize_t n = ::read(fd, buf, sizeof(buf));
      if (n <= 0 && errno != EAGAIN) return;
      if (n > 0) got.append(buf, static_cast<size_t>(n));
    }
  });
  CHECK(conn->SendBeforeClose(frame, std::chrono::seconds(20)));
  reader.join();
  CHECK(got == frame);
  CHECK(conn->idle());

  // Nobody reads now: the limit passes.
  const auto start = std::chrono::steady_clock::now();
  CHECK_FALSE(conn->SendBeforeClose(frame, std::chrono::milliseconds(50)));
  CHECK(std::chrono::steady_clock::now() - start >= std::chrono::milliseconds(50));
  CHECK(conn->idle());  // the rest is dropped, not queued

  conn->SendFramed(KvPutFrame(2, 10));  // outside a batch: a write starts
  REQUIRE_FALSE(conn->idle());
  CHECK_FALSE(conn->SendBeforeClose(frame, std::chrono::milliseconds(50)));
  conn->Close(absl::CancelledError("bye"));
  Drain(io);
}

TEST_CASE("Close() from inside the frame handler is safe", "[connection]") {
  // Three frames arrive in one read; the handler closes on the first and drops the
  // last outside reference to the connection. Run under ASan to catch a use after
  // free of the connection or of its read buffer.
  boost::asio::io_context io;
  auto [socket, peer] = SocketAndRawPeer(io);
  auto conn = Connection::Create(std::move(socket));
  std::weak_ptr<Connection> weak = conn;
  int frames = 0;
  int closes = 0;
  absl::Status why;
  std::string key_after_close;
  bool drop_in_close_handler = false;
  SECTION("the frame handler drops the last reference") {}
  SECTION("the close handler drops the last reference") { drop_in_close_handler = true; }
  auto holder = std::make_shared<std::shared_ptr<Connection>>(std::move(conn));
  (*holder)->Start(
      [&, holder](Connection& c, proto::Envelope::Reader msg) {
        ++frames;
        if (!drop_in_close_handler) holder->reset();
        c.Close(absl::CancelledError("closed by the frame handler"));
        // The message stays readable until the handler returns.
        key_after_close = msg.getKvPut().getKey().cStr();
      },
      [&, holder](Connection& c, const absl::Status& s) {
        ++closes;
        why = s;
        CHECK(c.closed());
        if (drop_in_close_handler) holder->reset();
      });
  WriteRaw(io, peer.get(), KvPutFrame(1, 100) + KvPutFrame(2, 100) + KvPutFrame(3, 100));
  REQUIRE(RunUntil(io, [&] { return closes > 0; }));
  // Once the pending operations are gone, nothing keeps the connection alive.
  REQUIRE(RunUntil(io, [&] { return weak.expired(); }));
  CHECK(frames == 1);
  CHECK(closes == 1);
  CHECK(key_after_close == "key-1");
  CHECK(why.code() == absl::StatusCode::kCancelled);
  CHECK(why.message() == "closed by the frame handler");
}

TEST_CASE("Closing one connection leaves others on the same io_context alone", "[connection]") {
  boost::asio::io_context io;
  auto [bad_socket, bad_peer] = SocketAndRawPeer(io);
  auto [good_socket, good_peer] = SocketAndRawPeer(io);
  auto bad = Connection::Create(std::move(bad_socket));
  auto good = Connection::Create(std::move(good_socket));
  CHECK(bad->id() != good->id());
  Received bad_got, good_got;
  StartRecording(bad, &bad_got);
  StartRecording(good, &good_got);
  WriteRaw(io, bad_peer.get(), Header(8, 0) + std::string(8, '\0'));
  REQUIRE(RunUntil(io, [&] { return bad_got.closes > 0; }));
  WriteRaw(io, good_peer.get(), KvPutFrame(1, 10));
  REQUIRE(RunUntil(io, [&] { return good_got.frames.size() == 1; }));
  CHECK(good_got.closes == 0);
  CHECK_FALSE(good->closed());
  CHECK(IsKvPut(good_got.frames[0], 1, 10));
}

}  // namespace
