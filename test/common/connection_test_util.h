// Helpers shared by the Connection tests (connection_test.cc,
// connection_hostile_test.cc): socket pairs, running an io_context until a
// condition holds (with a deadline), raw frames, a recorder of received frames.
#pragma once

#include "lumen/common/connection.h"
#include "lumen/common/logging.h"

#include <capnp/schema.h>
#include <capnp/serialize.h>
#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio.hpp>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "lumen/proto/lumen.capnp.h"

namespace lumen_connection_test {


using lumen::Connection;
using lumen::ConnectionOptions;
using lumen::kFrameHeaderBytes;
using lumen::kFrameMagic;
using lumen::Socket;
namespace proto = lumen::proto;

constexpr auto kDeadline = std::chrono::seconds(20);

// ---------------------------------------------------------------------------
// Helpers

class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  Fd(Fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Fd& operator=(Fd&& other) noexcept {
    Reset();
    fd_ = std::exchange(other.fd_, -1);
    return *this;
  }
  ~Fd() { Reset(); }
  int get() const { return fd_; }
  void Reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_;
};

// A blocking AF_UNIX stream socketpair.
inline std::pair<Fd, Fd> RawPair() {
  int fds[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) == 0);
  return {Fd(fds[0]), Fd(fds[1])};
}

inline Socket ToGeneric(boost::asio::io_context& io, boost::asio::local::stream_protocol::socket s) {
  int fd = s.release();
  return Socket(io, boost::asio::generic::stream_protocol(AF_UNIX, 0), fd);
}

// Two connected sockets, both ready to become Connections.
inline std::pair<Socket, Socket> SocketPair(boost::asio::io_context& io) {
  boost::asio::local::stream_protocol::socket a(io), b(io);
  boost::asio::local::connect_pair(a, b);
  return {ToGeneric(io, std::move(a)), ToGeneric(io, std::move(b))};
}

// One side as a Socket for a Connection, the other as a raw non-blocking fd that
// the test writes bytes to by hand.
inline std::pair<Socket, Fd> SocketAndRawPeer(boost::asio::io_context& io) {
  boost::asio::local::stream_protocol::socket a(io), b(io);
  boost::asio::local::connect_pair(a, b);
  Fd raw(b.release());
  int flags = ::fcntl(raw.get(), F_GETFL);
  REQUIRE(::fcntl(raw.get(), F_SETFL, flags | O_NONBLOCK) == 0);
  return {ToGeneric(io, std::move(a)), std::move(raw)};
}

// Runs handlers until `done()` holds; false when the deadline passes first.
template <typename Pred>
inline bool RunUntil(boost::asio::io_context& io, Pred done) {
  auto deadline = std::chrono::steady_clock::now() + kDeadline;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    if (io.stopped()) io.restart();
    io.run_one_for(std::chrono::milliseconds(5));
  }
  return true;
}

// Runs whatever is ready now, without blocking.
inline void Drain(boost::asio::io_context& io) {
  if (io.stopped()) io.restart();
  io.poll();
}

// Bytes received by `fd` that nobody has read yet.
inline int Unread(int fd) {
  int n = -1;
  REQUIRE(::ioctl(fd, FIONREAD, &n) == 0);
  return n;
}

// Writes all of `bytes` to a non-blocking fd, running `io` while the socket is full
// (the reader is on the same io_context).
inline void WriteRaw(boost::asio::io_context& io, int fd, std::string_view bytes) {
  auto deadline = std::chrono::steady_clock::now() + kDeadline;
  while (!bytes.empty()) {
    ssize_t n = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n < 0) {
      REQUIRE((errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR));
      REQUIRE(std::chrono::steady_clock::now() < deadline);
      if (io.stopped()) io.restart();
      io.run_one_for(std::chrono::milliseconds(1));
      continue;
    }
    bytes.remove_prefix(static_cast<size_t>(n));
  }
}

// Deterministic bytes, different for every seed.
inline std::string Pattern(uint64_t seed, size_t n) {
  std::string s(n, '\0');
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (size_t i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    s[i] = static_cast<char>(x);
  }
  return s;
}

inline void BuildKvPut(capnp::MessageBuilder& message, uint64_t request_id, size_t value_bytes) {
  auto env = message.initRoot<proto::Envelope>();
  env.setRequestId(request_id);
  auto kv = env.initKvPut();
  kv.setKey(absl::StrCat("key-", request_id));
  std::string value = Pattern(request_id, value_bytes);
  kv.setValue(capnp::Data::Reader(reinterpret_cast<const uint8_t*>(value.data()), value.size()));
}

inline std::string KvPutFrame(uint64_t request_id, size_t value_bytes) {
  capnp::MallocMessageBuilder message;
  BuildKvPut(message, request_id, value_bytes);
  std::string frame;
  lumen::AppendFrame(message, &frame);
  return frame;
}

inline std::string Header(uint32_t length, uint32_t magic) {
  uint8_t h[8];
  for (int i = 0; i < 4; ++i) {
    h[i] = static_cast<uint8_t>(length >> (8 * i));
    h[4 + i] = static_cast<uint8_t>(magic >> (8 * i));
  }
  return std::string(reinterpret_cast<const char*>(h), sizeof(h));
}

inline std::string Words(const std::vector<uint64_t>& words) {
  std::string s(words.size() * 8, '\0');
  for (size_t i = 0; i < words.size(); ++i) {
    for (int b = 0; b < 8; ++b) s[i * 8 + b] = static_cast<char>(words[i] >> (8 * b));
  }
  return s;
}

// A frame around `payload` with a correct header.
inline std::string RawFrame(const std::string& payload) {
  return Header(static_cast<uint32_t>(payload.size()), kFrameMagic) + payload;
}

// What a receiving Connection saw.
struct Received {
  struct Frame {
    uint64_t request_id;
    std::string key;
    std::string value;
  };
  std::vector<Frame> frames;
  int closes = 0;
  absl::Status close_status;
};

// Starts `conn`, recording every kvPut frame and the close.
inline void StartRecording(const std::shared_ptr<Connection>& conn, Received* r) {
  conn->Start(
      [r](Connection&, proto::Envelope::Reader msg) {
        Received::Frame f;
        f.request_id = msg.getRequestId();
        if (msg.isKvPut()) {
          auto kv = msg.getKvPut();
          f.key = kv.getKey().cStr();
          auto v = kv.getValue();
          f.value.assign(reinterpret_cast<const char*>(v.begin()), v.size());
        }
        r->frames.push_back(std::move(f));
      },
      [r](Connection&, const absl::Status& why) {
        ++r->closes;
        r->close_status = why;
      });
}

inline bool IsKvPut(const Received::Frame& f, uint64_t request_id, size_t value_bytes) {
  return f.request_id == request_id && f.key == absl::StrCat("key-", request_id) &&
         f.value == Pattern(request_id, value_bytes);
}

// ---------------------------------------------------------------------------
// Frame format

}  // namespace lumen_connection_test
