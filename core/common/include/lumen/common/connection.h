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
#include <chrono>
#include <cstdint>
#include <optional>
#include <string_view>
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
  // Every frame is walked whole before its handler runs (DecodeFrame), until
  // the hello is accepted; after it only when this is true. The daemons keep
  // the default; a worker's or driver's connections to authenticated runtime
  // peers turn it off (the task hot path), where Cap'n Proto's per-read
  // checks and the traversal limit still bound what a frame can make the
  // handler do (frame_decoder.h).
  bool walk_frames_after_hello = true;

  // Server side: until AcceptHello() frames are limited to this many bytes
  // (0: no hello phase, `max_frame_bytes` from the start) ...
  size_t max_frame_bytes_before_hello = 0;
  // ... and the connection closes (DeadlineExceeded) if AcceptHello() has not
  // been called this long after Start() (0: no deadline).
  std::chrono::milliseconds hello_timeout{0};
  // Runs once, on the io thread, when the hello phase ends: at AcceptHello() or
  // when the connection closes before it.
  std::function<void()> on_hello_phase_end;

  // Backpressure (0: unbounded). While more than this many bytes wait to be
  // written, frames from the peer are not read; once the queue is down to half of
  // it, reading resumes. A queue that stays above it for `send_stall_timeout`
  // closes the connection (ResourceExhausted).
  size_t max_send_queue_bytes = 0;
  std::chrono::milliseconds send_stall_timeout{30000};
};

// The options of a worker's or driver's connection to another runtime process
// (an owner, a leased worker, an actor, a borrower): no whole-frame walk once
// the peer is authenticated (see walk_frames_after_hello).
inline ConnectionOptions RuntimePeerConnectionOptions() {
  ConnectionOptions options;
  options.walk_frames_after_hello = false;
  return options;
}

// A daemon's limits for the connections it accepts, from the environment
// (doc/configuration.md); the two timeouts are Timeouts' fields of those names:
//   LUMEN_HELLO_TIMEOUT_MS          (default 5000)  hello deadline
//   LUMEN_MAX_PENDING_HELLOS        (default 128)   connections awaiting hello, per
//                                                   HelloAdmission (one per listener)
//   LUMEN_MAX_SEND_QUEUE_BYTES      (default 16 MiB) outgoing bytes before reads pause
//   LUMEN_SEND_STALL_TIMEOUT_MS     (default 30000) how long a peer may leave them unread
struct ServerLimits {
  size_t max_frame_bytes_before_hello = 16u << 10;
  std::chrono::milliseconds hello_timeout{5000};
  size_t max_pending_hellos = 128;
  size_t max_send_queue_bytes = 16u << 20;
  std::chrono::milliseconds send_stall_timeout{30000};

  static ServerLimits FromEnv();
};

// The connections one listener has accepted that have not said hello yet, and
// the cap on how many there may be. Only on the listener's io thread.
//
//   HelloAdmission admission(io, ServerLimits::FromEnv(), "head");
//   acceptor.async_accept([&](auto ec, auto socket) {
//     auto conn = admission.Admit(ToSocket(socket));   // nullptr: refused and logged
//     if (conn) conn->Start(on_frame, on_close);        // call conn->AcceptHello() later
//   });
class HelloAdmission {
 public:
  // `who` names the daemon in log lines.
  HelloAdmission(ServerLimits limits, std::string who);
  // A Connection with the hello-phase limits, or nullptr (the socket closed and a
  // rate-limited warning naming the peer logged) when `max_pending_hellos` are
  // already waiting for their hello.
  std::shared_ptr<class Connection> Admit(Socket socket, ConnectionOptions base = {});
  size_t pending() const { return *pending_; }
  const ServerLimits& limits() const { return limits_; }

 private:
  ServerLimits limits_;
  std::string who_;
  std::shared_ptr<size_t> pending_;  // shared with the connections' hello-phase callbacks
};

// True when `a` equals `b`, in time that does not depend on where they differ
// (for comparing secrets such as the cluster token).
bool ConstantTimeEquals(std::string_view a, std::string_view b);

// "ADDRESS:PORT" for TCP, "unix socket (pid P, uid U)" for a Unix peer, or
// "unknown peer".
std::string DescribePeer(int fd);

// Logs, as a WARNING, that `who` closed or refused the connection from `peer`
// and why. Rate-limited process-wide (a few lines a second); the next line that
// gets through says how many were suppressed.
void LogRejectedConnection(std::string_view who, std::string_view peer, const absl::Status& why);

// Serialises `message` as one frame (header + flat array), appended to `out`.
void AppendFrame(capnp::MessageBuilder& message, std::string* out);

// Checks a frame header; returns the payload length.
absl::StatusOr<size_t> ParseFrameHeader(const uint8_t* header, size_t max_frame_bytes);

// Blocking frame I/O on a connected socket fd, for handshakes before a socket joins
// an event loop. `ReadFrameBlocking` fills `words` with the payload.
[[nodiscard]] absl::Status WriteFrameBlocking(int fd, capnp::MessageBuilder& message);
[[nodiscard]] absl::Status ReadFrameBlocking(int fd, size_t max_frame_bytes, std::vector<capnp::word>* words);

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

  // Queues a frame. Inside a WriteBatch (write_batch.h: around the frames of
  // each read and every lumen::Post handler) it goes out when the outermost
  // batch ends, in one write with everything else queued for this connection
  // meanwhile; outside one the write starts at once. Frames queued while a
  // write is in flight go out together in the next write.
  void Send(capnp::MessageBuilder& message);
  // Queues already-framed bytes (from AppendFrame), as Send.
  void SendFramed(std::string_view frames);

  // Thread-safe: writes `frames` at once from the calling thread when nothing else
  // is queued (one non-blocking send), saving a hop through the event loop on a
  // hot reply path. Returns true if all of it went out; false if it was queued
  // instead, and then the caller must have the io thread call Flush().
  bool TrySendNow(std::string_view frames);
  // Thread-safe: the last frames of a process about to exit (or of a connection
  // about to close). Writes `frames` from the calling thread when nothing else is
  // queued, waiting up to `limit` in all for the peer to make room: one
  // non-blocking send would cut a frame larger than the socket's buffer short,
  // and the peer would read a torn frame. True if all of it went out; false if
  // none was sent (something else queued, closed) or the limit passed (the rest
  // is dropped, not queued).
  bool SendBeforeClose(std::string_view frames, std::chrono::milliseconds limit);
  // Starts writing what is queued (io thread).
  void Flush();

  // Thread-safe, for threads other than the io thread (a worker's executor
  // replying): queues `frames` behind whatever is queued. With `now`, when
  // nothing is queued or being written, writes them at once from the calling
  // thread instead (one non-blocking send: the synchronous round trip, no hop
  // through the io thread). Returns true when the caller must have the io
  // thread call Flush(); at most once until that flush runs: frames queued
  // meanwhile, from any thread, go out with it in one write (one wake-up of
  // the io thread per batch, none while a write is in flight).
  [[nodiscard]] bool SendFromAnyThread(std::string_view frames, bool now);

  void Close(const absl::Status& reason);
  bool closed() const { return closed_; }

  // Server side: the peer's hello was accepted; frames up to `max_frame_bytes`
  // are allowed from now on and the hello deadline is off (io thread).
  void AcceptHello();
  bool hello_accepted() const { return hello_accepted_; }
  // Who the peer is, for log lines (see DescribePeer); fixed at creation.
  const std::string& peer() const { return peer_; }
  // Bytes queued or being written; the read buffer's size (for tests and stats).
  size_t send_queue_bytes() const;
  size_t read_buffer_bytes() const { return read_buffer_.size() * sizeof(capnp::word); }
  // Reading is paused for backpressure (io thread).
  bool reading_paused() const { return reading_paused_; }
  // Nothing queued or being written.
  bool idle() const {
    absl::MutexLock lock(&write_mu_);
    return !write_in_flight_ && pending_writes_.empty();
  }
  uint64_t id() const { return id_; }
  Socket& socket() { return socket_; }
  // How many write system calls this connection made (tests and stats).
  uint64_t write_calls() const { return write_calls_.load(std::memory_order_relaxed); }
  // How many read completions handed it bytes (tests and stats).
  uint64_t read_calls() const { return read_calls_; }

  // State owned by whoever serves this connection (e.g. which worker it is).
  std::any& context() { return context_; }

  // Sees every frame queued by Send/SendFramed from now on, also after Close
  // (io thread): the head keeps the reply to a retried request this way
  // (core/head/request_deduplicator.h). Unset: one branch per send.
  using SendTap = std::function<void(std::string_view frames)>;
  void set_send_tap(SendTap tap) { send_tap_ = std::move(tap); }

 private:
  friend class WriteBatch;
  static constexpr size_t kInitialReadBufferBytes = 8192;
  static constexpr size_t kMinReadBytes = 4096;
  static constexpr size_t kMaxIdleReadBufferBytes = 1u << 20;
  // A read that fills the buffer doubles it for the next one, up to this:
  // a peer that sends faster than we read gets many frames per receive.
  static constexpr size_t kBusyReadBufferBytes = 64u << 10;

  Connection(Socket socket, ConnectionOptions options);
  void ReadMore();
  void OnRead(size_t bytes);
  // Handles the complete frames in the read buffer, then reads more unless
  // paused or closed.
  void ProcessFrames();
  void FlushWrites();
  // Send/SendFramed: flush now, or when the thread's WriteBatch ends.
  void FlushNowOrAtBatchEnd();
  // The WriteBatch this connection registered with has ended (io thread).
  void FlushDeferred();
  void WriteSome();
  size_t frame_limit() const {
    return hello_accepted_ ? options_.max_frame_bytes : options_.max_frame_bytes_before_hello;
  }
  void EndHelloPhase();
  // Backpressure: pauses reading / arms the stall deadline when the send queue is
  // over its limit, resumes when it has drained (io thread).
  void CheckSendQueue();
  void ArmStallTimer();
  void DisarmStallTimer();
  void WaitForStall(uint64_t generation, std::chrono::steady_clock::time_point at);

  Socket socket_;
  ConnectionOptions options_;
  uint64_t id_;
  std::string peer_;
  // True when there is no hello phase, or once AcceptHello() ran (io thread).
  bool hello_accepted_ = true;
  bool reading_paused_ = false;     // io thread
  bool read_in_flight_ = false;     // io thread
  bool last_read_filled_ = false;   // io thread: the last read filled the buffer
  uint64_t read_calls_ = 0;         // io thread
  bool flush_deferred_ = false;     // io thread: registered with a WriteBatch
  std::optional<boost::asio::steady_timer> hello_timer_;  // io thread
  // The stall deadline (io thread): armed while reading is paused for
  // backpressure; it fires `send_stall_timeout` after the last write that
  // completed. The generation tells a stale handler from the current one.
  std::optional<boost::asio::steady_timer> stall_timer_;
  bool stall_armed_ = false;
  uint64_t stall_generation_ = 0;
  std::chrono::steady_clock::time_point stall_progress_;
  // Bytes the frame at read_begin_ needs in all (0: not known yet); the read
  // buffer grows no further than that.
  size_t partial_frame_bytes_ = 0;
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
  size_t writing_offset_ = 0;  // bytes of writing_ already written (io thread)
  size_t writing_bytes_ ABSL_GUARDED_BY(write_mu_) = 0;  // writing_.size(), for other threads
  bool write_in_flight_ ABSL_GUARDED_BY(write_mu_) = false;
  // SendFromAnyThread asked for a Flush that has not run yet.
  bool flush_due_ ABSL_GUARDED_BY(write_mu_) = false;
  std::atomic<uint64_t> write_calls_{0};
  std::any context_;
  SendTap send_tap_;  // io thread
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
