// Framed Cap'n Proto messages over a stream socket (TCP or Unix), driven by Asio.
//
//   auto conn = lumen::Connection::Create(std::move(socket));
//   conn->Start(
//       [](lumen::Connection& c, lumen::proto::Envelope::Reader msg) { ... },
//       [](lumen::Connection& c, const absl::Status& why) { ... });
//   capnp::MallocMessageBuilder out;
//   out.initRoot<lumen::proto::Envelope>().setGetNodes();
//   conn->Send(out);
//
// A frame is an 8-byte header (little-endian u32 payload length, u32 magic) and
// a Cap'n Proto flat-array message whose length is a multiple of 8 bytes; see
// doc/wire_format.md. A frame over the size limit, a bad header, or a message
// Cap'n Proto refuses closes that one connection with a logged reason.
#pragma once

#include <capnp/message.h>
#include <capnp/serialize.h>

#include <any>
#include <atomic>
#include <boost/asio.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "lumen/proto/lumen.capnp.h"

namespace lumen {

using Socket = boost::asio::generic::stream_protocol::socket;

inline constexpr uint32_t kFrameMagic = 0x4c4d4e46;  // "FNML"
inline constexpr size_t kFrameHeaderBytes = 8;

struct ConnectionOptions {
  // Frames larger than this close the connection.
  size_t max_frame_bytes = 64u << 20;
  // Cap'n Proto nesting limit for decoding.
  int nesting_limit = 64;
};

// Serialises `message` as one frame (header + flat array), appended to `out`.
void AppendFrame(capnp::MessageBuilder& message, std::string* out);

// Checks a frame header; returns the payload length.
absl::StatusOr<size_t> ParseFrameHeader(const uint8_t* header, size_t max_frame_bytes);

// Blocking frame I/O on a connected socket fd, for handshakes before a socket joins
// an event loop. `ReadFrameBlocking` fills `words` with the payload.
absl::Status WriteFrameBlocking(int fd, capnp::MessageBuilder& message);
absl::Status ReadFrameBlocking(int fd, size_t max_frame_bytes, std::vector<capnp::word>* words);

// A connection lives on one io thread: every method must be called on the thread
// running its executor. Pending async operations hold a shared_ptr to it, which is
// why it is shared-owned.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  using FrameHandler = std::function<void(Connection&, proto::Envelope::Reader)>;
  using CloseHandler = std::function<void(Connection&, const absl::Status&)>;

  static std::shared_ptr<Connection> Create(Socket socket, ConnectionOptions options = {});
  ~Connection();

  // Starts reading. `on_frame` runs for every frame; a Cap'n Proto decode error it
  // raises closes the connection. `on_close` runs once, when the peer goes away or
  // Close() is called.
  void Start(FrameHandler on_frame, CloseHandler on_close);

  // Queues a frame. Frames queued while a write is in flight go out together in
  // the next write (one syscall for many frames).
  void Send(capnp::MessageBuilder& message);
  // Queues already-framed bytes (from AppendFrame).
  void SendFramed(std::string_view frames);

  // Thread-safe: writes `frames` at once from the calling thread when nothing else
  // is queued (one non-blocking send), saving a hop through the event loop on a
  // hot reply path. Returns true if all of it went out; false if it was queued
  // instead, and then the caller must have the io thread call Flush().
  bool TrySendNow(std::string_view frames);
  // Starts writing what is queued (io thread).
  void Flush();

  void Close(const absl::Status& reason);
  bool closed() const { return closed_; }
  // Nothing queued or being written.
  bool idle() const {
    absl::MutexLock lock(&write_mu_);
    return !write_in_flight_ && pending_writes_.empty();
  }
  uint64_t id() const { return id_; }
  Socket& socket() { return socket_; }

  // State owned by whoever serves this connection (e.g. which worker it is).
  std::any& context() { return context_; }

 private:
  Connection(Socket socket, ConnectionOptions options);
  void ReadMore();
  void OnRead(size_t bytes);
  void FlushWrites();

  Socket socket_;
  ConnectionOptions options_;
  uint64_t id_;
  FrameHandler on_frame_;
  CloseHandler on_close_;
  std::atomic<bool> closed_{false};
  // Read buffer in words, so that every frame's payload is 8-byte aligned.
  std::vector<capnp::word> read_buffer_;
  size_t read_begin_ = 0;  // bytes
  size_t read_end_ = 0;    // bytes
  // The write side may be touched by TrySendNow from another thread.
  mutable absl::Mutex write_mu_;
  std::string pending_writes_ ABSL_GUARDED_BY(write_mu_);
  std::string writing_;  // owned by the write in flight
  bool write_in_flight_ ABSL_GUARDED_BY(write_mu_) = false;
  std::any context_;
};

// Convenience: an Envelope builder on a stack-friendly first segment.
class OutMessage {
 public:
  OutMessage() : scratch_{}, builder_(kj::arrayPtr(scratch_, kScratchWords)) {}
  proto::Envelope::Builder Init() { return builder_.initRoot<proto::Envelope>(); }
  capnp::MessageBuilder& builder() { return builder_; }

 private:
  static constexpr size_t kScratchWords = 128;
  capnp::word scratch_[kScratchWords];
  capnp::MallocMessageBuilder builder_;
};

}  // namespace lumen
