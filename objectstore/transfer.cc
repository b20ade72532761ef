#include "lumen/objectstore/transfer.h"

#include <netinet/in.h>
#include <netinet/tcp.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <optional>
#include <memory>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "lumen/common/connection.h"
#include "lumen/common/logging.h"
#include "lumen/common/post.h"
#include "lumen/common/process.h"

namespace lumen::objectstore {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

namespace {

// Socket buffer size asked for on both ends of a transfer connection. Setting
// it turns the kernel's buffer autotuning off for that socket, so it is only
// set where net.core.{r,w}mem_max allow the full size (a default host caps it
// at ~200 KiB, far below what autotuning reaches).
constexpr int kSocketBufferBytes = 4 << 20;

bool SysctlAtLeast(const char* path, long want) {
  FILE* f = std::fopen(path, "re");  // "e": close-on-exec
  if (f == nullptr) return false;
  long value = 0;
  bool ok = std::fscanf(f, "%ld", &value) == 1 && value >= want;
  std::fclose(f);
  return ok;
}
bool CanSetSendBuffer() {
  static const bool ok = SysctlAtLeast("/proc/sys/net/core/wmem_max", kSocketBufferBytes);
  return ok;
}
bool CanSetReceiveBuffer() {
  static const bool ok = SysctlAtLeast("/proc/sys/net/core/rmem_max", kSocketBufferBytes);
  return ok;
}

void PutU32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
void PutU64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint32_t GetU32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(p[i]) << (8 * i);
  return v;
}
uint64_t GetU64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

void TuneSocket(tcp::socket& socket, bool big_send, bool big_recv) {
  SetCloseOnExec(socket.native_handle());  // never inherited by a worker
  boost::system::error_code ignored;
  socket.set_option(tcp::no_delay(true), ignored);
  if (big_send && CanSetSendBuffer()) {
    socket.set_option(asio::socket_base::send_buffer_size(kSocketBufferBytes), ignored);
  }
  if (big_recv && CanSetReceiveBuffer()) {
    socket.set_option(asio::socket_base::receive_buffer_size(kSocketBufferBytes), ignored);
  }
}

std::string FormatEndpoint(const tcp::endpoint& ep) {
  if (ep.address().is_v6()) return absl::StrCat("[", ep.address().to_string(), "]:", ep.port());
  return absl::StrCat(ep.address().to_string(), ":", ep.port());
}

// Splits "host:port" / "[v6]:port".
bool SplitAddress(const std::string& address, std::string* host, std::string* port) {
  size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size()) return false;
  std::string h = address.substr(0, colon);
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  if (h.empty()) return false;
  int port_number = 0;
  if (!absl::SimpleAtoi(address.substr(colon + 1), &port_number) || port_number <= 0 ||
      port_number > 65535) {
    return false;
  }
  *host = std::move(h);
  *port = address.substr(colon + 1);
  return true;
}

absl::StatusCode CodeFromWire(uint32_t code) {
  if (code == 0 || code > static_cast<uint32_t>(absl::StatusCode::kUnauthenticated)) {
    return absl::StatusCode::kUnknown;
  }
  return static_cast<absl::StatusCode>(code);
}

}  // namespace

// ---------------------------------------------------------------------------
// Server
// ---------------------------------------------------------------------------

struct TransferServer::Shared {
  PinFn pin;
  UnpinFn unpin;
  std::string token;
  // A connection must present its token within this; a rejected one is closed
  // by then too.
  std::chrono::milliseconds hello_timeout = ServerLimits::FromEnv().hello_timeout;
  bool stopped = false;
  absl::flat_hash_set<std::shared_ptr<Session>> sessions;
};

class TransferServer::Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, std::shared_ptr<Shared> shared)
      : socket_(std::move(socket)), shared_(std::move(shared)), deadline_(socket_.get_executor()) {
    boost::system::error_code ec;
    auto ep = socket_.remote_endpoint(ec);
    peer_ = ec ? std::string("?") : FormatEndpoint(ep);
  }

  void Start() {
    if (shared_->hello_timeout.count() > 0) {  // 0: no deadline, as for Connection
      deadline_.expires_after(shared_->hello_timeout);
      deadline_.async_wait([this, self = shared_from_this()](const boost::system::error_code& ec) {
        if (ec || closed_ || token_accepted_) return;
        CloseWithWarning(rejected_ ? "a rejected peer stayed connected past the hello deadline"
                                   : "no hello before the deadline");
      });
    }
    ReadHello();
  }

  // Closes the socket (cancelling what is in flight), releases the pin, and
  // forgets the session. Idempotent.
  void Close() {
    if (closed_) return;
    closed_ = true;
    boost::system::error_code ignored;
    deadline_.cancel();
    socket_.close(ignored);
    ReleasePin();
    queue_.clear();
    // May drop the last reference: keep this alive until we return.
    auto self = shared_from_this();
    shared_->sessions.erase(self);
  }

 private:
  struct Request {
    ObjectId id;
    uint64_t offset;
    uint64_t length;
    uint64_t object_size;
  };
  // Requests queued beyond this stop the reading until the writer catches up.
  static constexpr size_t kMaxQueuedRequests = 256;

  void CloseWithWarning(const std::string& why) {
    if (closed_) return;
    LogRejectedConnection("transfer server", peer_, absl::PermissionDeniedError(why));
    Close();
  }

  void ReadHello() {
    auto self = shared_from_this();
    asio::async_read(socket_, asio::buffer(hello_),
                     [this, self](const boost::system::error_code& ec, size_t) {
                       if (closed_) return;
                       if (ec) return Close();
                       if (GetU32(hello_.data()) != kTransferMagic) {
                         return CloseWithWarning("bad magic in hello");
                       }
                       uint32_t token_len = GetU32(hello_.data() + 4);
                       if (token_len > kTransferMaxTokenBytes) {
                         return CloseWithWarning(absl::StrCat("token of ", token_len, " bytes"));
                       }
                       token_.resize(token_len);
                       if (token_len == 0) return OnToken();
                       asio::async_read(socket_, asio::buffer(token_),
                                        [this, self](const boost::system::error_code& ec, size_t) {
                                          if (closed_) return;
                                          if (ec) return Close();
                                          OnToken();
                                        });
                     });
  }

  void OnToken() {
    if (!shared_->token.empty() && !ConstantTimeEquals(token_, shared_->token)) {
      LogRejectedConnection("transfer server", peer_,
                            absl::PermissionDeniedError("wrong or missing cluster token"));
      rejected_ = true;
    } else {
      token_accepted_ = true;
      deadline_.cancel();
    }
    in_.resize(64 * kTransferRequestBytes);
    ReadRequests();
  }

  void ReadRequests() {
    if (reading_ || closed_) return;
    if (queue_.size() >= kMaxQueuedRequests) return;  // Resumed by the writer.
    reading_ = true;
    auto self = shared_from_this();
    socket_.async_read_some(
        asio::buffer(in_.data() + in_len_, in_.size() - in_len_),
        [this, self](const boost::system::error_code& ec, size_t n) {
          reading_ = false;
          if (closed_) return;
          if (ec) return Close();  // EOF or error: the puller went away.
          in_len_ += n;
          if (draining_) {
            in_len_ = 0;
            return ReadRequests();
          }
          size_t pos = 0;
          while (in_len_ - pos >= kTransferRequestBytes) {
            const uint8_t* p = in_.data() + pos;
            if (GetU32(p) != kTransferMagic) return CloseWithWarning("bad magic in request");
            Request r;
            std::memcpy(r.id.mutable_data(), p + 4, ObjectId::kSize);
            r.offset = GetU64(p + 24);
            r.length = GetU64(p + 32);
            r.object_size = GetU64(p + 40);
            queue_.push_back(r);
            pos += kTransferRequestBytes;
          }
          std::memmove(in_.data(), in_.data() + pos, in_len_ - pos);
          in_len_ -= pos;
          MaybeWrite();
          ReadRequests();
        });
  }

  void ReleasePin() {
    if (pinned_id_) {
      ObjectId id = *pinned_id_;
      pinned_id_.reset();
      pinned_ = {};
      shared_->unpin(id);
    }
  }

  // Sends the reply to the front request, if no write is in flight.
  void MaybeWrite() {
    if (writing_ || closed_ || draining_ || queue_.empty()) return;
    Request r = queue_.front();
    queue_.pop_front();

    if (rejected_) {
      SendError(absl::PermissionDeniedError("the transfer server rejected the token"));
      return;
    }
    // Pin once per run of consecutive requests for the same object.
    if (pinned_id_ && *pinned_id_ != r.id) ReleasePin();
    if (!pinned_id_) {
      absl::StatusOr<std::span<const uint8_t>> bytes = shared_->pin(r.id);
      if (!bytes.ok()) {
        SendError(bytes.status());
        return;
      }
      pinned_id_ = r.id;
      pinned_ = *bytes;
    }
    const uint64_t size = pinned_.size();
    if (size != r.object_size) {
      SendError(absl::DataLossError(absl::StrCat("object ", r.id.Hex(), " has ", size,
                                                 " bytes, the puller expected ", r.object_size)));
      return;
    }
    if (r.offset > size || r.length > size - r.offset) {
      SendError(absl::OutOfRangeError(absl::StrCat("range [", r.offset, ", +", r.length,
                                                   ") is past the end of object ", r.id.Hex(),
                                                   " (", size, " bytes)")));
      return;
    }
    PutU32(reply_.data(), kTransferMagic);
    PutU32(reply_.data() + 4, 0);
    PutU64(reply_.data() + 8, r.length);
    std::array<asio::const_buffer, 2> buffers = {
        asio::buffer(reply_), asio::buffer(pinned_.data() + r.offset, r.length)};
    Write(buffers);
  }

  void SendError(const absl::Status& status) {
    error_ = std::string(status.message());
    if (error_.size() > kTransferMaxErrorBytes) error_.resize(kTransferMaxErrorBytes);
    PutU32(reply_.data(), kTransferMagic);
    PutU32(reply_.data() + 4, static_cast<uint32_t>(status.code()));
    PutU64(reply_.data() + 8, error_.size());
    std::array<asio::const_buffer, 2> buffers = {asio::buffer(reply_), asio::buffer(error_)};
    Write(buffers);
  }

  void Write(const std::array<asio::const_buffer, 2>& buffers) {
    writing_ = true;
    auto self = shared_from_this();
    asio::async_write(socket_, buffers, [this, self](const boost::system::error_code& ec, size_t) {
      writing_ = false;
      if (closed_) return;
      if (ec) return Close();
      if (rejected_) {
        // The puller has its answer. Half-close and discard what it still sends
        // until it hangs up, so that closing cannot reset the connection before
        // the answer is read.
        draining_ = true;
        queue_.clear();
        boost::system::error_code ignored;
        socket_.shutdown(tcp::socket::shutdown_send, ignored);
        ReadRequests();
        return;
      }
      // Keep the pin only while the next request is for the same object.
      if (pinned_id_ && (queue_.empty() || queue_.front().id != *pinned_id_)) ReleasePin();
      MaybeWrite();
      ReadRequests();
    });
  }

  tcp::socket socket_;
  std::shared_ptr<Shared> shared_;
  asio::steady_timer deadline_;  // hello deadline; for a rejected peer, its end
  std::string peer_;
  bool closed_ = false;
  bool rejected_ = false;  // Wrong token: answer the first request with an error.
  bool token_accepted_ = false;  // the hello deadline no longer applies
  bool draining_ = false;  // Answered that; waiting for the puller to hang up.
  bool reading_ = false;
  bool writing_ = false;
  std::array<uint8_t, kTransferHelloBytes> hello_{};
  std::string token_;
  std::vector<uint8_t> in_;
  size_t in_len_ = 0;
  std::deque<Request> queue_;
  std::optional<ObjectId> pinned_id_;
  std::span<const uint8_t> pinned_;
  std::array<uint8_t, kTransferReplyHeaderBytes> reply_{};
  std::string error_;
};

TransferServer::TransferServer(asio::io_context& io, PinFn pin, UnpinFn unpin, std::string token)
    : io_(io), acceptor_(io), shared_(std::make_shared<Shared>()) {
  shared_->pin = std::move(pin);
  shared_->unpin = std::move(unpin);
  shared_->token = std::move(token);
}

TransferServer::~TransferServer() {
  shared_->stopped = true;
  boost::system::error_code ignored;
  acceptor_.close(ignored);
  std::vector<std::shared_ptr<Session>> sessions(shared_->sessions.begin(),
                                                 shared_->sessions.end());
  for (auto& s : sessions) s->Close();
}

absl::Status TransferServer::Listen(const std::string& host, int port) {
  if (acceptor_.is_open()) return absl::FailedPreconditionError("TransferServer already listening");
  if (port < 0 || port > 65535) return absl::InvalidArgumentError(absl::StrCat("bad port ", port));
  boost::system::error_code ec;
  tcp::resolver resolver(io_);
  auto results = resolver.resolve(host, std::to_string(port),
                                  tcp::resolver::passive | tcp::resolver::numeric_service, ec);
  if (ec || results.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot resolve transfer listen host ", host, ": ", ec.message()));
  }
  tcp::endpoint endpoint = results.begin()->endpoint();
  acceptor_.open(endpoint.protocol(), ec);
  if (!ec) SetCloseOnExec(acceptor_.native_handle());
  if (!ec) acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor_.bind(endpoint, ec);
  if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    boost::system::error_code ignored;
    acceptor_.close(ignored);
    return absl::UnavailableError(absl::StrCat("cannot listen for transfers on ", host, ":", port,
                                               ": ", ec.message()));
  }
  address_ = FormatEndpoint(acceptor_.local_endpoint(ec));
  Accept();
  return absl::OkStatus();
}

std::string TransferServer::address() const { return address_; }

size_t TransferServer::num_connections() const { return shared_->sessions.size(); }

void TransferServer::Accept() {
  std::shared_ptr<Shared> shared = shared_;
  acceptor_.async_accept([this, shared](const boost::system::error_code& ec, tcp::socket socket) {
    if (shared->stopped) return;  // `this` is gone.
    if (ec == asio::error::operation_aborted) return;
    if (!ec) {
      TuneSocket(socket, /*big_send=*/true, /*big_recv=*/false);
      auto session = std::make_shared<Session>(std::move(socket), shared);
      shared->sessions.insert(session);
      session->Start();
    } else {
      LUMEN_LOG(WARNING) << "transfer server: accept failed: " << ec.message();
    }
    Accept();
  });
}

// ---------------------------------------------------------------------------
// Client
// ---------------------------------------------------------------------------

namespace {

struct PullOp {
  ObjectId id;
  uint64_t size = 0;
  uint8_t* dest = nullptr;
  std::function<void(absl::Status)> done;
  uint64_t next_offset = 0;   // First byte not yet requested.
  bool all_requested = false;  // No more chunk requests will be sent.
  int outstanding = 0;        // Chunk requests sent, reply not yet fully read.
  bool finished = false;
  absl::Status status;  // First error.
};

}  // namespace

class TransferClient::Conn : public std::enable_shared_from_this<Conn> {
 public:
  Conn(TransferClient* owner, std::string address)
      : owner_(owner),
        io_(owner->io_),
        address_(std::move(address)),
        socket_(owner->io_),
        resolver_(owner->io_),
        chunk_bytes_(std::max<size_t>(owner->chunk_bytes_, 1)),
        window_(std::max(owner->window_, 1)) {
    // The hello goes out first, ahead of any request.
    out_.resize(kTransferHelloBytes + owner->token_.size());
    PutU32(out_.data(), kTransferMagic);
    PutU32(out_.data() + 4, static_cast<uint32_t>(owner->token_.size()));
    std::memcpy(out_.data() + kTransferHelloBytes, owner->token_.data(), owner->token_.size());
  }

  void Connect(const std::string& host, const std::string& port) {
    auto self = shared_from_this();
    resolver_.async_resolve(
        host, port, tcp::resolver::numeric_service,
        [this, self](const boost::system::error_code& ec, tcp::resolver::results_type results) {
          if (state_ == kClosed) return;
          if (ec) return Fail(ConnectError(ec));
          asio::async_connect(socket_, results,
                              [this, self](const boost::system::error_code& ec, const tcp::endpoint&) {
                                if (state_ == kClosed) return;
                                if (ec) return Fail(ConnectError(ec));
                                TuneSocket(socket_, /*big_send=*/false, /*big_recv=*/true);
                                state_ = kReady;
                                Pump();
                              });
        });
  }

  void Add(std::shared_ptr<PullOp> pull) {
    pending_.push_back(std::move(pull));
    Pump();
  }

  // Fails every pull on this connection with `status`, closes it and removes it
  // from the owner. Idempotent.
  void Fail(const absl::Status& status) {
    if (state_ == kClosed) return;
    state_ = kClosed;
    boost::system::error_code ignored;
    socket_.close(ignored);
    resolver_.cancel();
    // A pull that already got an error from the server reports that one.
    for (auto& c : inflight_) Finish(*c.pull, c.pull->status.ok() ? status : c.pull->status);
    for (auto& p : pending_) Finish(*p, p->status.ok() ? status : p->status);
    inflight_.clear();
    pending_.clear();
    auto self = shared_from_this();
    if (owner_ != nullptr) {
      auto it = owner_->conns_.find(address_);
      if (it != owner_->conns_.end() && it->second.get() == this) owner_->conns_.erase(it);
      owner_ = nullptr;
    }
  }

  void Detach() { owner_ = nullptr; }

 private:
  enum State { kConnecting, kReady, kClosed };
  struct Chunk {
    std::shared_ptr<PullOp> pull;
    uint64_t offset;
    uint64_t length;
  };

  absl::Status ConnectError(const boost::system::error_code& ec) const {
    return absl::UnavailableError(
        absl::StrCat("cannot connect to transfer server ", address_, ": ", ec.message()));
  }
  absl::Status LostError(const boost::system::error_code& ec) const {
    return absl::UnavailableError(absl::StrCat(
        "connection to transfer server ", address_, " lost: ",
        ec == asio::error::eof ? std::string("closed by the server") : ec.message()));
  }
  absl::Status ProtocolError(const std::string& what) const {
    LUMEN_LOG(WARNING) << "transfer client: " << address_ << ": " << what;
    return absl::DataLossError(
        absl::StrCat("protocol error from transfer server ", address_, ": ", what));
  }

  void Finish(PullOp& pull, absl::Status status) {
    if (pull.finished) return;
    pull.finished = true;
    lumen::Post(io_, "transfer.pull_done", [done = std::move(pull.done), status = std::move(status)]() mutable {
      done(std::move(status));
    });
  }

  // Sends chunk requests while the window has room, and starts the reader.
  void Pump() {
    if (state_ != kReady) return;
    while (inflight_.size() < static_cast<size_t>(window_) && !pending_.empty()) {
      std::shared_ptr<PullOp> p = pending_.front();
      if (!p->status.ok()) {  // Failed by an earlier reply: request no more.
        pending_.pop_front();
        p->all_requested = true;
        if (p->outstanding == 0) Finish(*p, p->status);
        continue;
      }
      uint64_t length = std::min<uint64_t>(chunk_bytes_, p->size - p->next_offset);
      size_t at = out_.size();
      out_.resize(at + kTransferRequestBytes);
      uint8_t* q = out_.data() + at;
      PutU32(q, kTransferMagic);
      std::memcpy(q + 4, p->id.data(), ObjectId::kSize);
      PutU64(q + 24, p->next_offset);
      PutU64(q + 32, length);
      PutU64(q + 40, p->size);
      inflight_.push_back(Chunk{p, p->next_offset, length});
      p->outstanding++;
      p->next_offset += length;
      if (p->next_offset >= p->size) {
        p->all_requested = true;
        pending_.pop_front();
      }
    }
    StartWrite();
    if (!reading_ && !inflight_.empty()) ReadHeader();
  }

  void StartWrite() {
    if (writing_ || out_.empty() || state_ != kReady) return;
    writing_ = true;
    writing_buf_.swap(out_);
    out_.clear();
    auto self = shared_from_this();
    asio::async_write(socket_, asio::buffer(writing_buf_),
                      [this, self](const boost::system::error_code& ec, size_t) {
                        writing_ = false;
                        if (state_ == kClosed) return;
                        if (ec) return Fail(LostError(ec));
                        writing_buf_.clear();
                        StartWrite();
                      });
  }

  void ReadHeader() {
    reading_ = true;
    auto self = shared_from_this();
    asio::async_read(socket_, asio::buffer(header_),
                     [this, self](const boost::system::error_code& ec, size_t) {
                       if (state_ == kClosed) return;
                       if (ec) return Fail(LostError(ec));
                       OnHeader();
                     });
  }

  void OnHeader() {
    if (GetU32(header_.data()) != kTransferMagic) return Fail(ProtocolError("bad reply magic"));
    uint32_t code = GetU32(header_.data() + 4);
    uint64_t length = GetU64(header_.data() + 8);
    const Chunk& c = inflight_.front();
    auto self = shared_from_this();
    if (code != 0) {
      if (length > kTransferMaxErrorBytes) {
        return Fail(ProtocolError(absl::StrCat("error message of ", length, " bytes")));
      }
      error_.resize(length);
      asio::async_read(socket_, asio::buffer(error_),
                       [this, self, code](const boost::system::error_code& ec, size_t) {
                         if (state_ == kClosed) return;
                         if (ec) return Fail(LostError(ec));
                         OnChunkDone(absl::Status(
                             CodeFromWire(code),
                             absl::StrCat("transfer server ", address_, ": ", error_)));
                       });
      return;
    }
    if (length != c.length) {
      return Fail(ProtocolError(absl::StrCat("reply of ", length, " bytes to a request for ",
                                             c.length)));
    }
    if (length == 0) return OnChunkDone(absl::OkStatus());
    asio::async_read(socket_, asio::buffer(c.pull->dest + c.offset, length),
                     [this, self](const boost::system::error_code& ec, size_t) {
                       if (state_ == kClosed) return;
                       if (ec) return Fail(LostError(ec));
                       OnChunkDone(absl::OkStatus());
                     });
  }

  void OnChunkDone(absl::Status status) {
    reading_ = false;
    Chunk c = std::move(inflight_.front());
    inflight_.pop_front();
    PullOp& p = *c.pull;
    p.outstanding--;
    if (!status.ok() && p.status.ok()) p.status = std::move(status);
    if (p.outstanding == 0 && p.all_requested) Finish(p, p.status);
    Pump();
  }

  TransferClient* owner_;
  asio::io_context& io_;
  std::string address_;
  tcp::socket socket_;
  tcp::resolver resolver_;
  const size_t chunk_bytes_;
  const int window_;
  State state_ = kConnecting;
  std::deque<std::shared_ptr<PullOp>> pending_;  // Pulls with chunks still to request.
  std::deque<Chunk> inflight_;                   // Requested, in request order.
  std::vector<uint8_t> out_;                     // Queued for writing.
  std::vector<uint8_t> writing_buf_;             // Owned by the write in flight.
  bool writing_ = false;
  bool reading_ = false;
  std::array<uint8_t, kTransferReplyHeaderBytes> header_{};
  std::string error_;
};

TransferClient::TransferClient(asio::io_context& io, std::string token, size_t chunk_bytes,
                               int window)
    : io_(io), token_(std::move(token)), chunk_bytes_(chunk_bytes), window_(window) {}

TransferClient::~TransferClient() {
  auto conns = std::move(conns_);
  conns_.clear();
  for (auto& [address, conn] : conns) {
    conn->Detach();
    conn->Fail(absl::CancelledError("TransferClient destroyed"));
  }
}

void TransferClient::Pull(const std::string& address, const ObjectId& id, uint64_t size,
                          uint8_t* dest, std::function<void(absl::Status)> done) {
  auto it = conns_.find(address);
  if (it == conns_.end()) {
    std::string host, port;
    if (!SplitAddress(address, &host, &port)) {
      lumen::Post(io_, "transfer.bad_address", [done = std::move(done), address]() {
        done(absl::InvalidArgumentError(
            absl::StrCat("bad transfer server address \"", address, "\" (want host:port)")));
      });
      return;
    }
    auto conn = std::make_shared<Conn>(this, address);
    it = conns_.emplace(address, conn).first;
    conn->Connect(host, port);
  }
  auto pull = std::make_shared<PullOp>();
  pull->id = id;
  pull->size = size;
  pull->dest = dest;
  pull->done = std::move(done);
  // Keep the connection alive across Add, which may fail it (and drop it from conns_).
  std::shared_ptr<Conn> conn = it->second;
  conn->Add(std::move(pull));
}

// ---------------------------------------------------------------------------
// Loopback baseline
// ---------------------------------------------------------------------------

double MeasureLoopbackTcpBytesPerSecond(uint64_t bytes) {
  // Moves `bytes` from one buffer of that size to a fresh one of that size over
  // a loopback socket: what copying an object between two processes costs
  // without any protocol (the destination's pages are faulted in on the way,
  // as a new store object's are).
  constexpr size_t kIoBytes = 4 << 20;
  try {
    asio::io_context io;
    tcp::acceptor acceptor(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    tcp::endpoint endpoint = acceptor.local_endpoint();
    std::vector<uint8_t> source(bytes);
    for (uint64_t i = 0; i < bytes; i += 4096) source[i] = static_cast<uint8_t>(i * 31 + 7);
    std::unique_ptr<uint8_t[]> destination(new uint8_t[bytes]);

    tcp::socket sender(io);
    tcp::socket receiver(io);
    sender.connect(endpoint);
    acceptor.accept(receiver);
    // The same socket settings as a transfer connection.
    TuneSocket(sender, /*big_send=*/true, /*big_recv=*/false);
    TuneSocket(receiver, /*big_send=*/false, /*big_recv=*/true);

    auto start = std::chrono::steady_clock::now();
    std::thread writer([&] {
      uint64_t sent = 0;
      boost::system::error_code ec;
      while (sent < bytes && !ec) {
        size_t n = static_cast<size_t>(std::min<uint64_t>(bytes - sent, kIoBytes));
        sent += asio::write(sender, asio::buffer(source.data() + sent, n), ec);
      }
      sender.shutdown(tcp::socket::shutdown_send, ec);
    });
    uint64_t got = 0;
    boost::system::error_code ec;
    while (got < bytes && !ec) {
      size_t n = static_cast<size_t>(std::min<uint64_t>(bytes - got, kIoBytes));
      got += asio::read(receiver, asio::buffer(destination.get() + got, n), ec);
    }
    auto end = std::chrono::steady_clock::now();
    writer.join();
    if (got < bytes) return 0;
    double seconds = std::chrono::duration<double>(end - start).count();
    return seconds > 0 ? static_cast<double>(bytes) / seconds : 0;
  } catch (const boost::system::system_error& e) {
    LUMEN_LOG(WARNING) << "loopback TCP measurement failed: " << e.what();
    return 0;
  }
}

}  // namespace lumen::objectstore
