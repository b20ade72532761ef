#include "lumen/common/connection.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <kj/exception.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "lumen/common/frame_decoder.h"
#include "lumen/common/logging.h"
#include "lumen/common/post.h"
#include "lumen/common/process.h"
#include "lumen/common/timeouts.h"
#include "lumen/common/write_batch.h"

namespace lumen {
namespace {

std::atomic<uint64_t> next_connection_id{1};

// EAGAIN on a blocking socket means its SO_RCVTIMEO/SO_SNDTIMEO passed.
bool IsNonBlocking(int fd) { return (::fcntl(fd, F_GETFL) & O_NONBLOCK) != 0; }

absl::Status WriteAll(int fd, const char* data, size_t len) {
  while (len > 0) {
    ssize_t n = ::send(fd, data, len, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        if (!IsNonBlocking(fd)) return absl::DeadlineExceededError("send timed out");
        pollfd p{fd, POLLOUT, 0};
        ::poll(&p, 1, -1);
        continue;
      }
      return absl::UnavailableError(absl::StrCat("send failed: ", std::strerror(errno)));
    }
    data += n;
    len -= static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::Status ReadAll(int fd, char* data, size_t len) {
  while (len > 0) {
    ssize_t n = ::recv(fd, data, len, 0);
    if (n == 0) return absl::UnavailableError("connection closed by peer");
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        if (!IsNonBlocking(fd)) return absl::DeadlineExceededError("no reply in time");
        pollfd p{fd, POLLIN, 0};
        ::poll(&p, 1, -1);
        continue;
      }
      return absl::UnavailableError(absl::StrCat("recv failed: ", std::strerror(errno)));
    }
    data += n;
    len -= static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

}  // namespace

void AppendFrame(capnp::MessageBuilder& message, std::string* out) {
  auto segments = message.getSegmentsForOutput();
  size_t words = capnp::computeSerializedSizeInWords(segments);
  size_t start = out->size();
  out->resize(start + kFrameHeaderBytes + words * sizeof(capnp::word));
  uint32_t header[2] = {static_cast<uint32_t>(words * sizeof(capnp::word)), kFrameMagic};
  std::memcpy(out->data() + start, header, sizeof(header));
  kj::ArrayPtr<capnp::word> dest(
      reinterpret_cast<capnp::word*>(out->data() + start + kFrameHeaderBytes), words);
  // messageToFlatArray into a caller-provided buffer: write the segment table and
  // segments directly.
  kj::ArrayPtr<kj::byte> bytes = dest.asBytes();
  kj::ArrayOutputStream stream(bytes);
  capnp::writeMessage(stream, segments);
}

absl::Status WriteFrameBlocking(int fd, capnp::MessageBuilder& message) {
  std::string frame;
  AppendFrame(message, &frame);
  return WriteAll(fd, frame.data(), frame.size());
}

absl::Status ReadFrameBlocking(int fd, size_t max_frame_bytes, std::vector<capnp::word>* words) {
  uint8_t header[kFrameHeaderBytes];
  if (auto s = ReadAll(fd, reinterpret_cast<char*>(header), sizeof(header)); !s.ok()) return s;
  auto len = ParseFrameHeader(header, max_frame_bytes);
  if (!len.ok()) return len.status();
  // Grow with what arrives, never to the declared length at once.
  constexpr size_t kStepBytes = 1u << 20;
  words->clear();
  size_t done = 0;
  while (done < *len) {
    size_t step = std::min(kStepBytes, *len - done);
    words->resize((done + step) / sizeof(capnp::word));
    if (auto s = ReadAll(fd, reinterpret_cast<char*>(words->data()) + done, step); !s.ok()) {
      return s;
    }
    done += step;
  }
  return absl::OkStatus();
}

bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  // The length of the secret is not hidden; its content is.
  if (a.size() != b.size()) return false;
  volatile unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = static_cast<unsigned char>(diff | (a[i] ^ b[i]));  // C++20: no |= on a volatile
  }
  return diff == 0;
}

std::string DescribePeer(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return "unknown peer";
  char host[INET6_ADDRSTRLEN] = {};
  if (addr.ss_family == AF_INET) {
    auto* in = reinterpret_cast<sockaddr_in*>(&addr);
    ::inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
    return absl::StrCat(host, ":", ntohs(in->sin_port));
  }
  if (addr.ss_family == AF_INET6) {
    auto* in6 = reinterpret_cast<sockaddr_in6*>(&addr);
    ::inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
    return absl::StrCat("[", host, "]:", ntohs(in6->sin6_port));
  }
  if (addr.ss_family == AF_UNIX) {
    ucred cred{};
    socklen_t cred_len = sizeof(cred);
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cred_len) == 0) {
      return absl::StrCat("unix socket (pid ", cred.pid, ", uid ", cred.uid, ")");
    }
    return "unix socket";
  }
  return "unknown peer";
}

void LogRejectedConnection(std::string_view who, std::string_view peer, const absl::Status& why) {
  static logging::RateLimiter* limiter = new logging::RateLimiter(5, std::chrono::seconds(1));
  uint64_t suppressed = 0;
  if (!limiter->Allow(&suppressed)) return;
  LUMEN_LOG(WARNING) << who << " closed the connection from " << peer << ": " << why
                     << (suppressed > 0
                             ? absl::StrCat(" (", suppressed,
                                            " similar messages suppressed)")
                             : std::string());
}

namespace {

size_t EnvSize(const char* name, size_t fallback) {
  const char* v = std::getenv(name);
  uint64_t parsed = 0;
  if (v == nullptr || !absl::SimpleAtoi(v, &parsed)) return fallback;
  return static_cast<size_t>(parsed);
}

}  // namespace

ServerLimits ServerLimits::FromEnv() {
  ServerLimits limits;
  // The timeouts are lumen::Timeouts' (one reader of each variable).
  const Timeouts timeouts = Timeouts::FromEnv();
  limits.hello_timeout = timeouts.hello_timeout;
  limits.send_stall_timeout = timeouts.send_stall_timeout;
  limits.max_pending_hellos = EnvSize("LUMEN_MAX_PENDING_HELLOS", limits.max_pending_hellos);
  limits.max_send_queue_bytes = EnvSize("LUMEN_MAX_SEND_QUEUE_BYTES", limits.max_send_queue_bytes);
  return limits;
}

HelloAdmission::HelloAdmission(ServerLimits limits, std::string who)
    : limits_(limits), who_(std::move(who)), pending_(std::make_shared<size_t>(0)) {}

std::shared_ptr<Connection> HelloAdmission::Admit(Socket socket, ConnectionOptions base) {
  if (*pending_ >= limits_.max_pending_hellos) {
    LogRejectedConnection(
        who_, DescribePeer(socket.native_handle()),
        absl::ResourceExhaustedError(absl::StrCat(
            limits_.max_pending_hellos,
            " connections are already waiting to say hello (LUMEN_MAX_PENDING_HELLOS)")));
    boost::system::error_code ignored;
    socket.close(ignored);
    return nullptr;
  }
  ++*pending_;
  base.max_frame_bytes_before_hello = limits_.max_frame_bytes_before_hello;
  base.hello_timeout = limits_.hello_timeout;
  base.max_send_queue_bytes = limits_.max_send_queue_bytes;
  base.send_stall_timeout = limits_.send_stall_timeout;
  base.on_hello_phase_end = [pending = pending_] { --*pending; };
  return Connection::Create(std::move(socket), std::move(base));
}

std::shared_ptr<Connection> Connection::Create(Socket socket, ConnectionOptions options) {
  return std::shared_ptr<Connection>(new Connection(std::move(socket), options));
}

Connection::Connection(Socket socket, ConnectionOptions options)
    : socket_(std::move(socket)),
      options_(std::move(options)),
      id_(next_connection_id.fetch_add(1)),
      peer_(DescribePeer(socket_.native_handle())) {
  hello_accepted_ = options_.max_frame_bytes_before_hello == 0;
  SetCloseOnExec(socket_.native_handle());  // a user task's exec must not hold it open
  read_buffer_.resize(kInitialReadBufferBytes / sizeof(capnp::word));
}

// A connection dropped without Close() still gives its hello-phase slot back.
Connection::~Connection() { EndHelloPhase(); }

void Connection::Start(FrameHandler on_frame, CloseHandler on_close) {
  on_frame_ = std::move(on_frame);
  on_close_ = std::move(on_close);
  if (!hello_accepted_ && options_.hello_timeout.count() > 0) {
    hello_timer_.emplace(socket_.get_executor());
    hello_timer_->expires_after(options_.hello_timeout);
    hello_timer_->async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
      if (ec || self->hello_accepted_ || self->closed_) return;
      self->Close(absl::DeadlineExceededError(absl::StrCat(
          "no hello within ", self->options_.hello_timeout.count(), " ms")));
    });
  }
  ReadMore();
}

void Connection::AcceptHello() {
  if (!hello_accepted_) {
    hello_accepted_ = true;
    if (hello_timer_) hello_timer_->cancel();
  }
  EndHelloPhase();
}

void Connection::EndHelloPhase() {
  if (options_.on_hello_phase_end) {
    auto done = std::move(options_.on_hello_phase_end);
    options_.on_hello_phase_end = nullptr;
    done();
  }
}

void Connection::ReadMore() {
  if (closed_ || reading_paused_ || read_in_flight_) return;
  size_t capacity = read_buffer_.size() * sizeof(capnp::word);
  size_t live = read_end_ - read_begin_;
  if (read_begin_ > 0 && (live == 0 || capacity - read_end_ < kMinReadBytes)) {
    // Compact: keep the partial frame at the (aligned) start of the buffer.
    char* base = reinterpret_cast<char*>(read_buffer_.data());
    std::memmove(base, base + read_begin_, live);
    read_begin_ = 0;
    read_end_ = live;
  }
  if (live == 0 && capacity > kMaxIdleReadBufferBytes) {
    // A large frame has been handled: an idle connection keeps a small buffer.
    std::vector<capnp::word>(kInitialReadBufferBytes / sizeof(capnp::word)).swap(read_buffer_);
    capacity = kInitialReadBufferBytes;
  }
  if (last_read_filled_ && capacity < kBusyReadBufferBytes) {
    // The last read filled the buffer: the peer sends faster than we read.
    // Take more frames per receive next time (issue 13).
    read_buffer_.resize(std::min(read_buffer_.size() * 2, kBusyReadBufferBytes / sizeof(capnp::word)));
    capacity = read_buffer_.size() * sizeof(capnp::word);
  }
  last_read_filled_ = false;
  if (capacity - read_end_ < kMinReadBytes) {
    // Grow with the bytes that have arrived (at most doubling), never to the
    // length a header claims: a peer must send bytes to make us hold them.
    // Nor past the end of the frame being read, plus room for a next header.
    size_t words = read_buffer_.size() * 2;
    if (partial_frame_bytes_ > 0) {
      size_t frame_end_words = (read_begin_ + partial_frame_bytes_ + kMinReadBytes) /
                                   sizeof(capnp::word) + 1;
      words = std::max(read_buffer_.size() + kMinReadBytes / sizeof(capnp::word),
                       std::min(words, frame_end_words));
    }
    read_buffer_.resize(words);
    capacity = read_buffer_.size() * sizeof(capnp::word);
  }
  char* base = reinterpret_cast<char*>(read_buffer_.data());
  read_in_flight_ = true;
  const size_t asked = capacity - read_end_;
  socket_.async_read_some(
      boost::asio::buffer(base + read_end_, asked),
      [self = shared_from_this(), asked](const boost::system::error_code& ec, size_t n) {
        self->read_in_flight_ = false;
        self->last_read_filled_ = !ec && n == asked;
        if (ec) {
          size_t partial = self->read_end_ - self->read_begin_;
          if (ec == boost::asio::error::eof && partial > 0) {
            // A truncated frame: worth a log line, unlike a plain close.
            self->Close(absl::DataLossError(absl::StrCat(
                "peer closed the connection in the middle of a frame (", partial, " of ",
                self->partial_frame_bytes_ > 0 ? absl::StrCat(self->partial_frame_bytes_)
                                               : std::string("at least 8"),
                " bytes)")));
            return;
          }
          self->Close(ec == boost::asio::error::eof
                          ? absl::UnavailableError("peer closed the connection")
                          : absl::UnavailableError(ec.message()));
          return;
        }
        self->OnRead(n);
      });
}

void Connection::OnRead(size_t bytes) {
  read_end_ += bytes;
  ++read_calls_;
  ProcessFrames();
}

void Connection::ProcessFrames() {
  // What the handlers send, to this connection or any other of this thread,
  // goes out when all these frames are handled: one write per connection.
  WriteBatch batch;
  while (!closed_ && !reading_paused_ && read_end_ - read_begin_ >= kFrameHeaderBytes) {
    const uint8_t* base = reinterpret_cast<const uint8_t*>(read_buffer_.data());
    auto len = ParseFrameHeader(base + read_begin_, frame_limit());
    if (!len.ok()) {
      Close(hello_accepted_ ? len.status()
                            : absl::Status(len.status().code(),
                                           absl::StrCat(len.status().message(),
                                                        " before the hello was accepted")));
      return;
    }
    size_t frame_bytes = kFrameHeaderBytes + *len;
    if (read_end_ - read_begin_ < frame_bytes) {
      partial_frame_bytes_ = frame_bytes;  // ReadMore grows the buffer as bytes come
      break;
    }
    partial_frame_bytes_ = 0;
    const capnp::word* payload =
        reinterpret_cast<const capnp::word*>(base + read_begin_ + kFrameHeaderBytes);
    read_begin_ += frame_bytes;
    absl::Status decoded =
        DecodeFrame(kj::arrayPtr(payload, *len / sizeof(capnp::word)),
                    {.nesting_limit = options_.nesting_limit,
                     .walk_whole_message = !hello_accepted_ || options_.walk_frames_after_hello},
                    [this](proto::Envelope::Reader envelope) { on_frame_(*this, envelope); });
    if (!decoded.ok()) {
      Close(decoded);
      return;
    }
    CheckSendQueue();
  }
  if (read_begin_ == read_end_) read_begin_ = read_end_ = 0;
  ReadMore();
}

size_t Connection::send_queue_bytes() const {
  absl::MutexLock lock(&write_mu_);
  return pending_writes_.size() + writing_bytes_;
}

void Connection::CheckSendQueue() {
  if (options_.max_send_queue_bytes == 0 || closed_) return;
  size_t queued = send_queue_bytes();
  if (queued > options_.max_send_queue_bytes) {
    // Stop taking requests from a peer that does not take our replies.
    reading_paused_ = true;
    if (!stall_armed_) ArmStallTimer();
    return;
  }
  if (reading_paused_ && queued <= options_.max_send_queue_bytes / 2) {
    reading_paused_ = false;
    DisarmStallTimer();
    // Frames already buffered first, then more from the socket (posted: this may
    // run inside a write completion or a Send from a frame handler).
    lumen::Post(socket_.get_executor(), "connection.resume_reading", [self = shared_from_this()] {
      if (!self->closed_ && !self->reading_paused_) self->ProcessFrames();
    });
  } else if (!reading_paused_ && stall_armed_) {
    DisarmStallTimer();
  }
}

void Connection::ArmStallTimer() {
  if (!stall_timer_) stall_timer_.emplace(socket_.get_executor());
  stall_armed_ = true;
  stall_progress_ = std::chrono::steady_clock::now();
  WaitForStall(++stall_generation_, stall_progress_ + options_.send_stall_timeout);
}

void Connection::DisarmStallTimer() {
  if (!stall_armed_) return;
  stall_armed_ = false;
  ++stall_generation_;  // a handler already due sees a newer generation and does nothing
  stall_timer_->cancel();
}

void Connection::WaitForStall(uint64_t generation, std::chrono::steady_clock::time_point at) {
  stall_timer_->expires_at(at);
  stall_timer_->async_wait(
      [self = shared_from_this(), generation](const boost::system::error_code& ec) {
        if (ec || self->closed_ || generation != self->stall_generation_) return;
        auto deadline = self->stall_progress_ + self->options_.send_stall_timeout;
        if (std::chrono::steady_clock::now() < deadline) {
          // A write completed meanwhile: the peer reads, slowly. Wait on.
          self->WaitForStall(generation, deadline);
          return;
        }
        self->Close(absl::ResourceExhaustedError(absl::StrCat(
            "the peer left ", self->send_queue_bytes(), " bytes unread for ",
            self->options_.send_stall_timeout.count(), " ms (limit ",
            self->options_.max_send_queue_bytes, " bytes, LUMEN_MAX_SEND_QUEUE_BYTES)")));
      });
}

void Connection::Send(capnp::MessageBuilder& message) {
  if (send_tap_) {
    std::string frame;
    AppendFrame(message, &frame);
    SendFramed(frame);
    return;
  }
  if (closed_) return;
  {
    absl::MutexLock lock(&write_mu_);
    AppendFrame(message, &pending_writes_);
  }
  FlushNowOrAtBatchEnd();
}

void Connection::SendFramed(std::string_view frames) {
  if (send_tap_) send_tap_(frames);
  if (closed_) return;
  {
    absl::MutexLock lock(&write_mu_);
    pending_writes_.append(frames);
  }
  FlushNowOrAtBatchEnd();
}

void Connection::FlushNowOrAtBatchEnd() {
  if (!WriteBatch::Active()) {
    FlushWrites();
    return;
  }
  if (flush_deferred_) return;
  flush_deferred_ = true;
  WriteBatch::FlushAtEnd(shared_from_this());
}

void Connection::FlushDeferred() {
  flush_deferred_ = false;
  FlushWrites();
}

bool Connection::TrySendNow(std::string_view frames) {
  absl::MutexLock lock(&write_mu_);
  if (closed_ || write_in_flight_ || !pending_writes_.empty()) {
    pending_writes_.append(frames);
    return false;
  }
  ssize_t n = ::send(socket_.native_handle(), frames.data(), frames.size(),
                     MSG_DONTWAIT | MSG_NOSIGNAL);
  write_calls_.fetch_add(1, std::memory_order_relaxed);
  if (n == static_cast<ssize_t>(frames.size())) return true;
  // Partly or not written (a full buffer, or an error the io thread will see).
  pending_writes_.append(frames.substr(n > 0 ? static_cast<size_t>(n) : 0));
  return false;
}

bool Connection::SendBeforeClose(std::string_view frames, std::chrono::milliseconds limit) {
  absl::MutexLock lock(&write_mu_);
  if (closed_ || write_in_flight_ || !pending_writes_.empty()) return false;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!frames.empty()) {
    ssize_t n = ::send(socket_.native_handle(), frames.data(), frames.size(),
                       MSG_DONTWAIT | MSG_NOSIGNAL);
    write_calls_.fetch_add(1, std::memory_order_relaxed);
    if (n > 0) {
      frames.remove_prefix(static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return false;
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline -
                                                                    std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd out{.fd = socket_.native_handle(), .events = POLLOUT, .revents = 0};
    if (::poll(&out, 1, static_cast<int>(left.count())) < 0 && errno != EINTR) return false;
  }
  return true;
}

bool Connection::SendFromAnyThread(std::string_view frames, bool now) {
  absl::MutexLock lock(&write_mu_);
  if (closed_) return false;
  if (now && !write_in_flight_ && pending_writes_.empty()) {
    ssize_t n = ::send(socket_.native_handle(), frames.data(), frames.size(),
                       MSG_DONTWAIT | MSG_NOSIGNAL);
    write_calls_.fetch_add(1, std::memory_order_relaxed);
    if (n == static_cast<ssize_t>(frames.size())) return false;
    // Partly or not written (a full buffer, or an error the io thread will see).
    frames.remove_prefix(n > 0 ? static_cast<size_t>(n) : 0);
  }
  pending_writes_.append(frames);
  // A write in flight takes what is queued when it completes; a due flush too.
  if (write_in_flight_ || flush_due_) return false;
  flush_due_ = true;
  return true;
}

void Connection::Flush() { FlushWrites(); }

void Connection::FlushWrites() {
  CheckSendQueue();
  {
    absl::MutexLock lock(&write_mu_);
    flush_due_ = false;  // this flush (or the write in flight's) takes it all
    if (write_in_flight_ || pending_writes_.empty() || closed_) return;
    write_in_flight_ = true;
    writing_.clear();
    writing_.swap(pending_writes_);
    writing_bytes_ = writing_.size();
  }
  writing_offset_ = 0;
  WriteSome();
}

// Writes the rest of `writing_`, one write_some at a time, so that the stall
// deadline sees every bit of progress a slow reader makes.
void Connection::WriteSome() {
  socket_.async_write_some(
      boost::asio::buffer(writing_.data() + writing_offset_, writing_.size() - writing_offset_),
      [self = shared_from_this()](const boost::system::error_code& ec, size_t n) {
        self->write_calls_.fetch_add(1, std::memory_order_relaxed);
        if (ec) {
          {
            absl::MutexLock lock(&self->write_mu_);
            self->write_in_flight_ = false;
            self->writing_bytes_ = 0;
          }
          self->Close(absl::UnavailableError(ec.message()));
          return;
        }
        self->stall_progress_ = std::chrono::steady_clock::now();
        self->writing_offset_ += n;
        bool done = self->writing_offset_ >= self->writing_.size();
        {
          absl::MutexLock lock(&self->write_mu_);
          self->writing_bytes_ = self->writing_.size() - self->writing_offset_;
          if (done) self->write_in_flight_ = false;
        }
        if (done) {
          self->FlushWrites();
        } else if (!self->closed_) {
          self->WriteSome();
        }
      });
}

void Connection::Close(const absl::Status& reason) {
  if (closed_) return;
  boost::system::error_code ignored;
  {
    // Not while another thread is in TrySendNow's send on this descriptor.
    absl::MutexLock lock(&write_mu_);
    if (!write_in_flight_ && !pending_writes_.empty()) {
      // Frames a batch deferred (e.g. a refusal sent just before this Close)
      // go out as they would have without the batch: one non-blocking send.
      ssize_t n = ::send(socket_.native_handle(), pending_writes_.data(), pending_writes_.size(),
                         MSG_DONTWAIT | MSG_NOSIGNAL);
      (void)n;
      write_calls_.fetch_add(1, std::memory_order_relaxed);
    }
    closed_ = true;
    socket_.shutdown(Socket::shutdown_both, ignored);
    socket_.close(ignored);
  }
  if (hello_timer_) hello_timer_->cancel();
  DisarmStallTimer();
  EndHelloPhase();
  if (on_close_) {
    auto handler = std::move(on_close_);
    on_close_ = nullptr;
    handler(*this, reason);
  }
}

}  // namespace lumen
