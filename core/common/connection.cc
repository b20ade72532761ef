#include "lumen/common/connection.h"

#include <fcntl.h>
#include <kj/exception.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "lumen/common/logging.h"

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

absl::StatusOr<size_t> ParseFrameHeader(const uint8_t* header, size_t max_frame_bytes) {
  uint32_t fields[2];
  std::memcpy(fields, header, sizeof(fields));
  if (fields[1] != kFrameMagic) {
    return absl::InvalidArgumentError("bad frame header (not a Lumen peer or corrupt stream)");
  }
  if (fields[0] > max_frame_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat("frame of ", fields[0],
                                                     " bytes exceeds the limit of ",
                                                     max_frame_bytes, " bytes"));
  }
  if (fields[0] == 0 || fields[0] % sizeof(capnp::word) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("frame length ", fields[0], " is not a positive multiple of 8"));
  }
  return static_cast<size_t>(fields[0]);
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
  words->resize(*len / sizeof(capnp::word));
  return ReadAll(fd, reinterpret_cast<char*>(words->data()), *len);
}

std::shared_ptr<Connection> Connection::Create(Socket socket, ConnectionOptions options) {
  return std::shared_ptr<Connection>(new Connection(std::move(socket), options));
}

Connection::Connection(Socket socket, ConnectionOptions options)
    : socket_(std::move(socket)), options_(options), id_(next_connection_id.fetch_add(1)) {
  read_buffer_.resize(8192);
}

Connection::~Connection() = default;

void Connection::Start(FrameHandler on_frame, CloseHandler on_close) {
  on_frame_ = std::move(on_frame);
  on_close_ = std::move(on_close);
  ReadMore();
}

void Connection::ReadMore() {
  if (closed_) return;
  size_t capacity = read_buffer_.size() * sizeof(capnp::word);
  if (read_begin_ > 0 && (read_end_ == read_begin_ || capacity - read_end_ < 4096)) {
    // Compact: keep the partial frame at the (aligned) start of the buffer.
    size_t live = read_end_ - read_begin_;
    char* base = reinterpret_cast<char*>(read_buffer_.data());
    std::memmove(base, base + read_begin_, live);
    read_begin_ = 0;
    read_end_ = live;
  }
  if (capacity - read_end_ < 4096) {
    read_buffer_.resize(read_buffer_.size() * 2);
    capacity = read_buffer_.size() * sizeof(capnp::word);
  }
  char* base = reinterpret_cast<char*>(read_buffer_.data());
  socket_.async_read_some(
      boost::asio::buffer(base + read_end_, capacity - read_end_),
      [self = shared_from_this()](const boost::system::error_code& ec, size_t n) {
        if (ec) {
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
  const uint8_t* base = reinterpret_cast<const uint8_t*>(read_buffer_.data());
  while (!closed_ && read_end_ - read_begin_ >= kFrameHeaderBytes) {
    auto len = ParseFrameHeader(base + read_begin_, options_.max_frame_bytes);
    if (!len.ok()) {
      Close(len.status());
      return;
    }
    size_t frame_bytes = kFrameHeaderBytes + *len;
    if (read_end_ - read_begin_ < frame_bytes) {
      // Make room for the whole frame (its size is already checked against the limit).
      size_t needed_words = (frame_bytes + 4096) / sizeof(capnp::word) + 1;
      if (read_buffer_.size() < needed_words) {
        size_t live = read_end_ - read_begin_;
        std::vector<capnp::word> bigger(needed_words);
        std::memcpy(bigger.data(), base + read_begin_, live);
        read_buffer_.swap(bigger);
        read_begin_ = 0;
        read_end_ = live;
      }
      break;
    }
    const capnp::word* payload =
        reinterpret_cast<const capnp::word*>(base + read_begin_ + kFrameHeaderBytes);
    read_begin_ += frame_bytes;
    try {
      capnp::ReaderOptions reader_options;
      reader_options.traversalLimitInWords = *len / sizeof(capnp::word) * 4 + 1024;
      reader_options.nestingLimit = options_.nesting_limit;
      capnp::FlatArrayMessageReader reader(
          kj::arrayPtr(payload, *len / sizeof(capnp::word)), reader_options);
      on_frame_(*this, reader.getRoot<proto::Envelope>());
    } catch (const kj::Exception& e) {
      Close(absl::InvalidArgumentError(
          absl::StrCat("malformed message: ", e.getDescription().cStr())));
      return;
    } catch (const std::exception& e) {
      Close(absl::InvalidArgumentError(absl::StrCat("bad message: ", e.what())));
      return;
    }
    base = reinterpret_cast<const uint8_t*>(read_buffer_.data());
  }
  if (read_begin_ == read_end_) read_begin_ = read_end_ = 0;
  ReadMore();
}

void Connection::Send(capnp::MessageBuilder& message) {
  if (closed_) return;
  {
    absl::MutexLock lock(&write_mu_);
    AppendFrame(message, &pending_writes_);
  }
  FlushWrites();
}

void Connection::SendFramed(std::string_view frames) {
  if (closed_) return;
  {
    absl::MutexLock lock(&write_mu_);
    pending_writes_.append(frames);
  }
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
  if (n == static_cast<ssize_t>(frames.size())) return true;
  // Partly or not written (a full buffer, or an error the io thread will see).
  pending_writes_.append(frames.substr(n > 0 ? static_cast<size_t>(n) : 0));
  return false;
}

void Connection::Flush() { FlushWrites(); }

void Connection::FlushWrites() {
  {
    absl::MutexLock lock(&write_mu_);
    if (write_in_flight_ || pending_writes_.empty() || closed_) return;
    write_in_flight_ = true;
    writing_.clear();
    writing_.swap(pending_writes_);
  }
  boost::asio::async_write(
      socket_, boost::asio::buffer(writing_),
      [self = shared_from_this()](const boost::system::error_code& ec, size_t) {
        {
          absl::MutexLock lock(&self->write_mu_);
          self->write_in_flight_ = false;
        }
        if (ec) {
          self->Close(absl::UnavailableError(ec.message()));
          return;
        }
        self->FlushWrites();
      });
}

void Connection::Close(const absl::Status& reason) {
  if (closed_) return;
  boost::system::error_code ignored;
  {
    // Not while another thread is in TrySendNow's send on this descriptor.
    absl::MutexLock lock(&write_mu_);
    closed_ = true;
    socket_.shutdown(Socket::shutdown_both, ignored);
    socket_.close(ignored);
  }
  if (on_close_) {
    auto handler = std::move(on_close_);
    on_close_ = nullptr;
    handler(*this, reason);
  }
}

}  // namespace lumen
