// Tests of write coalescing (issue 13): lumen::WriteBatch, the frames of one
// read or one posted handler going out in one write, Connection::
// SendFromAnyThread (the worker's replies from executor threads), and reads
// that take many frames per receive. Same harness as connection_test.cc: an
// io_context run on the test thread (or one io thread), no sleeps.
#include <sys/socket.h>

#include <atomic>
#include <future>
#include <cstdlib>
#include <random>
#include <thread>

#include "connection_test_util.h"
#include "lumen/common/post.h"
#include "lumen/common/write_batch.h"

#include <catch2/catch.hpp>

using namespace lumen_connection_test;  // NOLINT: the helpers of these tests

namespace {

uint64_t Seed() {
  const char* env = std::getenv("LUMEN_TEST_SEED");
  return env != nullptr ? std::strtoull(env, nullptr, 10) : std::random_device{}();
}

// Every frame of `got` is request i+first with a value of `value_bytes(i)`.
template <typename Size>
bool AllInOrder(const Received& got, size_t n, Size value_bytes, uint64_t first = 1) {
  if (got.frames.size() != n) return false;
  for (size_t i = 0; i < n; ++i) {
    if (!IsKvPut(got.frames[i], first + i, value_bytes(i))) return false;
  }
  return true;
}

}  // namespace

TEST_CASE("Frames sent inside one WriteBatch arrive intact and in order from one write",
          "[connection][batch]") {
  // Invariant: however many frames are queued to a connection while a
  // WriteBatch is alive, they leave in one write system call when it ends, and
  // the peer receives each intact, in order; outside a batch the first frame
  // is written at once (more than one write for the same frames).
  boost::asio::io_context io;
  auto [a, b] = SocketPair(io);
  auto sender = Connection::Create(std::move(a));
  auto receiver = Connection::Create(std::move(b));
  Received got, unused;
  StartRecording(sender, &unused);
  StartRecording(receiver, &got);
  auto size_of = [](size_t i) { return 10 + (i * 37) % 300; };
  constexpr size_t kFrames = 200;
  {
    lumen::WriteBatch batch;
    for (size_t i = 0; i < kFrames; ++i) {
      capnp::MallocMessageBuilder m;
      BuildKvPut(m, i + 1, size_of(i));
      sender->Send(m);
    }
    CHECK(sender->send_queue_bytes() > 0);  // nothing written while the batch lives
    CHECK(got.frames.empty());
  }
  REQUIRE(RunUntil(io, [&] { return got.frames.size() == kFrames; }));
  CHECK(AllInOrder(got, kFrames, size_of));
  CHECK(sender->write_calls() == 1);

  // Without a batch the first Send writes at once and the rest follow it.
  got.frames.clear();
  uint64_t before = sender->write_calls();
  for (size_t i = 0; i < kFrames; ++i) {
    capnp::MallocMessageBuilder m;
    BuildKvPut(m, i + 1, size_of(i));
    sender->Send(m);
  }
  REQUIRE(RunUntil(io, [&] { return got.frames.size() == kFrames; }));
  CHECK(AllInOrder(got, kFrames, size_of));
  CHECK(sender->write_calls() >= before + 2);
}

TEST_CASE("What the handlers of one read send goes out in one write per connection",
          "[connection][batch]") {
  // Invariant: frames that handlers send while the frames of one read are
  // handled (here: an echo of each, to the same connection and to a second
  // one) leave in one write per connection once the read's frames are done;
  // a posted handler's sends likewise.
  boost::asio::io_context io;
  auto [socket, raw] = SocketAndRawPeer(io);
  auto [c, d] = SocketPair(io);
  auto echo = Connection::Create(std::move(socket));
  auto other = Connection::Create(std::move(c));
  auto other_peer = Connection::Create(std::move(d));
  Received at_other, unused;
  StartRecording(other, &unused);
  StartRecording(other_peer, &at_other);
  int handled = 0;
  echo->Start(
      [&](Connection& conn, proto::Envelope::Reader msg) {
        ++handled;
        capnp::MallocMessageBuilder m;
        m.setRoot(msg);
        conn.Send(m);
        other->Send(m);
      },
      [](Connection&, const absl::Status&) {});
  constexpr size_t kFrames = 40;
  std::string bytes;
  for (size_t i = 0; i < kFrames; ++i) bytes += KvPutFrame(i + 1, 20);
  REQUIRE(bytes.size() < 8192);  // one read of the initial buffer
  REQUIRE(::send(raw.get(), bytes.data(), bytes.size(), MSG_NOSIGNAL) ==
          static_cast<ssize_t>(bytes.size()));
  REQUIRE(RunUntil(io, [&] { return handled == static_cast<int>(kFrames); }));
  CHECK(echo->read_calls() == 1);
  REQUIRE(RunUntil(io, [&] { return at_other.frames.size() == kFrames; }));
  CHECK(AllInOrder(at_other, kFrames, [](size_t) { return 20; }));
  // The echoes came back to the raw peer intact, in order.
  std::string echoed;
  const int raw_fd = raw.get();  // not `raw`: clang 14 cannot capture a structured binding
  REQUIRE(RunUntil(io, [&] {
    char buf[16384];
    ssize_t n = ::recv(raw_fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n > 0) echoed.append(buf, static_cast<size_t>(n));
    return echoed.size() >= bytes.size();
  }));
  CHECK(echoed == bytes);
  CHECK(echo->write_calls() == 1);
  CHECK(other->write_calls() == 1);

  // A posted handler: ten sends, one write.
  uint64_t before = other->write_calls();
  bool ran = false;
  lumen::Post(io, "test.send_ten", [&] {
    for (int i = 0; i < 10; ++i) {
      capnp::MallocMessageBuilder m;
      BuildKvPut(m, kFrames + 1 + i, 20);
      other->Send(m);
    }
    ran = true;
  });
  REQUIRE(RunUntil(io, [&] { return ran && at_other.frames.size() == kFrames + 10; }));
  CHECK(AllInOrder(at_other, kFrames + 10, [](size_t) { return 20; }));
  CHECK(other->write_calls() == before + 1);
}

TEST_CASE("Replies queued from another thread while the io thread is busy go out together",
          "[connection][batch]") {
  // Invariant: SendFromAnyThread asks for at most one flush until that flush
  // runs (one wake-up of the io thread per batch); every frame queued before
  // the flush leaves in its one write, intact and in order. With `now` and
  // nothing queued, the calling thread writes at once without the io thread.
  boost::asio::io_context io;
  auto [a, b] = SocketPair(io);
  auto sender = Connection::Create(std::move(a));
  auto receiver = Connection::Create(std::move(b));
  Received got, unused;
  StartRecording(sender, &unused);
  StartRecording(receiver, &got);
  constexpr size_t kFrames = 100;
  int flushes_asked = 0;
  // The io thread is busy (this test does not run it) while an executor
  // thread replies.
  std::thread executor([&] {
    for (size_t i = 0; i < kFrames; ++i) {
      if (sender->SendFromAnyThread(KvPutFrame(i + 1, 30), /*now=*/false)) ++flushes_asked;
    }
  });
  executor.join();
  CHECK(flushes_asked == 1);
  CHECK(sender->write_calls() == 0);
  CHECK(got.frames.empty());
  sender->Flush();
  REQUIRE(RunUntil(io, [&] { return got.frames.size() == kFrames; }));
  CHECK(AllInOrder(got, kFrames, [](size_t) { return 30; }));
  CHECK(sender->write_calls() == 1);

  // Nothing queued: written at once from the calling thread, no flush asked.
  uint64_t before = sender->write_calls();
  bool ask = true;
  std::thread one([&] { ask = sender->SendFromAnyThread(KvPutFrame(kFrames + 1, 30), /*now=*/true); });
  one.join();
  CHECK_FALSE(ask);
  CHECK(sender->write_calls() == before + 1);
  REQUIRE(RunUntil(io, [&] { return got.frames.size() == kFrames + 1; }));
  CHECK(IsKvPut(got.frames.back(), kFrames + 1, 30));
}

TEST_CASE("A reply too large for the socket buffer is written in parts and arrives intact",
          "[connection][batch]") {
  // Invariant: when the calling thread's send writes only part of the frames
  // (a full socket buffer), the rest is queued, a flush is asked for, and the
  // io thread writes the rest across as many partial writes as it takes:
  // the peer receives every frame intact and in order.
  boost::asio::io_context io;
  auto [a, b] = SocketPair(io);
  int small = 4096;
  REQUIRE(::setsockopt(a.native_handle(), SOL_SOCKET, SO_SNDBUF, &small, sizeof(small)) == 0);
  auto sender = Connection::Create(std::move(a));
  auto receiver = Connection::Create(std::move(b));
  Received got, unused;
  StartRecording(sender, &unused);
  StartRecording(receiver, &got);
  auto size_of = [](size_t i) { return 1000 + i * 3000; };
  constexpr size_t kFrames = 40;  // ~2.4 MB
  std::string frames;
  for (size_t i = 0; i < kFrames; ++i) frames += KvPutFrame(i + 1, size_of(i));
  bool ask = false;
  std::thread executor([&] { ask = sender->SendFromAnyThread(frames, /*now=*/true); });
  executor.join();
  CHECK(ask);  // only part of it fitted
  CHECK(sender->send_queue_bytes() > 0);
  CHECK(sender->send_queue_bytes() < frames.size());
  sender->Flush();
  REQUIRE(RunUntil(io, [&] { return got.frames.size() == kFrames; }));
  CHECK(AllInOrder(got, kFrames, size_of));
  CHECK(sender->write_calls() > 2);  // partial writes
  CHECK(sender->send_queue_bytes() == 0);
}

TEST_CASE("Replies from several threads while the io thread runs all arrive, each thread's in order",
          "[connection][batch]") {
  // Invariant: with executor threads calling SendFromAnyThread (randomly with
  // or without `now`) while the io thread flushes and writes, no frame is lost,
  // duplicated or torn, each thread's frames arrive in the order it sent them,
  // and there are fewer writes than frames.
  const uint64_t seed = Seed();
  INFO("seed " << seed);
  boost::asio::io_context io;
  auto [a, b] = SocketPair(io);
  auto sender = Connection::Create(std::move(a));
  auto receiver = Connection::Create(std::move(b));
  Received got, unused;
  StartRecording(sender, &unused);
  StartRecording(receiver, &got);
  constexpr int kThreads = 3;
  constexpr uint64_t kPerThread = 5000;
  auto guard = boost::asio::make_work_guard(io);
  std::thread io_thread([&] { io.run(); });
  std::vector<std::thread> executors;
  for (int t = 0; t < kThreads; ++t) {
    executors.emplace_back([&, t] {
      std::mt19937_64 rng(seed + t);
      for (uint64_t i = 0; i < kPerThread; ++i) {
        uint64_t id = (uint64_t(t) << 32) | (i + 1);
        if (sender->SendFromAnyThread(KvPutFrame(id, 8 + rng() % 64), rng() % 2 == 0)) {
          boost::asio::post(io, [s = sender] { s->Flush(); });
        }
      }
    });
  }
  for (auto& e : executors) e.join();
  std::atomic<bool> all{false};
  auto deadline = std::chrono::steady_clock::now() + kDeadline;
  while (!all && std::chrono::steady_clock::now() < deadline) {
    std::promise<size_t> n;
    boost::asio::post(io, [&] { n.set_value(got.frames.size()); });
    all = n.get_future().get() == kThreads * kPerThread;
  }
  guard.reset();
  io.stop();
  io_thread.join();
  REQUIRE(got.frames.size() == kThreads * kPerThread);
  std::vector<uint64_t> next(kThreads, 1);
  bool in_order = true;
  for (const auto& f : got.frames) {
    int t = static_cast<int>(f.request_id >> 32);
    REQUIRE(t < kThreads);
    in_order &= (f.request_id & 0xffffffffu) == next[t]++;
    in_order &= f.key == absl::StrCat("key-", f.request_id);
  }
  CHECK(in_order);
  CHECK(sender->write_calls() < kThreads * kPerThread);
}

TEST_CASE("A read that fills the buffer makes the next one larger", "[connection][batch]") {
  // Invariant: when a peer has sent more than the read buffer holds, the
  // connection reads it in a few growing receives (many frames per receive),
  // not one initial-sized receive after another, and gets every frame.
  boost::asio::io_context io;
  auto [socket, raw] = SocketAndRawPeer(io);
  auto conn = Connection::Create(std::move(socket));
  Received got;
  constexpr size_t kFrames = 1000;  // ~120 KiB of small frames
  std::string bytes;
  for (size_t i = 0; i < kFrames; ++i) bytes += KvPutFrame(i + 1, 50);
  REQUIRE(::send(raw.get(), bytes.data(), bytes.size(), MSG_NOSIGNAL) ==
          static_cast<ssize_t>(bytes.size()));
  StartRecording(conn, &got);
  REQUIRE(RunUntil(io, [&] { return got.frames.size() == kFrames; }));
  CHECK(AllInOrder(got, kFrames, [](size_t) { return 50; }));
  // 8 + 16 + 32 + 64 + 64 KiB reads at most; 8 KiB reads would take 15.
  INFO(bytes.size() << " bytes in " << conn->read_calls() << " reads");
  CHECK(conn->read_calls() <= 6);
}
