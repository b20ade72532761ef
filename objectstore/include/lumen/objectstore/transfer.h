// Node-to-node object transfer: raw bytes over TCP, chunked and pipelined.
//
//   // Node A (has the object), on its event loop:
//   TransferServer server(io, [&](const ObjectId& id) { return store.PinSealed(id); },
//                         [&](const ObjectId& id) { store.Unpin(id); }, token);
//   RETURN_IF_ERROR(server.Listen("10.0.0.1"));
//   std::string addr = server.address();  // "10.0.0.1:40123", published to pullers
//
//   // Node B (wants it), on its event loop:
//   TransferClient client(io, token);
//   uint8_t* dest = /* a freshly created, unsealed store object of `size` bytes */;
//   client.Pull(addr, id, size, dest, [](absl::Status s) { /* seal, or abort */ });
//
// Nothing on the data path is serialised: headers are fixed-size little-endian
// structs, and payload bytes go from the server's pinned object straight into
// the socket (one gather write of header + span) and from the socket straight
// into the puller's memory, so a transfer costs about what a plain socket copy
// of the same bytes costs.
//
// Wire protocol, per TCP connection (all integers little-endian):
//
//   client -> server, once:   u32 magic 'LMXF' | u32 token_len | token_len bytes of token
//   client -> server, then any number of requests (48 bytes each):
//       u32 magic | 20-byte object id | u64 offset | u64 length | u64 object_size
//   server -> client, one reply per request, in request order:
//       u32 magic | u32 status | u64 length | `length` bytes
//
// `object_size` is the size the puller expects the whole object to have; the
// server answers DataLoss when the object's real size differs, so a size
// mismatch is caught on the first chunk. `status` is an absl::StatusCode: 0
// (OK) is followed by exactly the `length` requested bytes of the object at
// `offset`; anything else by an error message of `length` bytes (at most
// kTransferMaxErrorBytes). A request past the end of the object gets
// OutOfRange; a missing object whatever the pin function returned (NotFound).
// A request of length 0 is valid (it checks that the object exists with the
// expected size; a zero-size object is pulled with one such request).
//
// When the server has a token, the hello must carry it; otherwise the server
// answers the connection's first request with PermissionDenied, logs a
// warning, and closes the connection. A bad magic, or a token longer than
// kTransferMaxTokenBytes, closes that one connection (with a logged warning);
// the server keeps serving the others.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include <boost/asio.hpp>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lumen/common/ids.h"

namespace lumen::objectstore {

inline constexpr uint32_t kTransferMagic = 0x46584d4c;  // "LMXF" as bytes on the wire
inline constexpr size_t kTransferHelloBytes = 8;        // before the token
inline constexpr size_t kTransferRequestBytes = 48;
inline constexpr size_t kTransferReplyHeaderBytes = 16;
inline constexpr size_t kTransferMaxTokenBytes = 4096;
inline constexpr size_t kTransferMaxErrorBytes = 4096;

// Serves byte ranges of sealed objects to pullers on other nodes. Runs on the
// caller's io_context (a single-threaded event loop; every callback, pin and
// unpin included, runs on it). Not thread-safe: construct, Listen and destroy
// it on the io thread, or while the loop is not running.
class TransferServer {
 public:
  // Pins a sealed object and returns its bytes (valid until Unpin), or an
  // error (NotFound, ...) that is sent to the puller.
  using PinFn = std::function<absl::StatusOr<std::span<const uint8_t>>(const ObjectId&)>;
  using UnpinFn = std::function<void(const ObjectId&)>;

  // `token`: when non-empty, every connection must present it in its hello
  // (see the protocol above); a wrong or missing one gets the connection
  // closed and a warning logged.
  TransferServer(boost::asio::io_context& io, PinFn pin, UnpinFn unpin, std::string token = "");
  // Closes the acceptor and every connection; pins still held are released
  // (unpin runs) before it returns.
  ~TransferServer();

  TransferServer(const TransferServer&) = delete;
  TransferServer& operator=(const TransferServer&) = delete;

  // Binds and starts accepting on `host` ("127.0.0.1", "0.0.0.0", "::1", a
  // name); port 0 picks a free one.
  [[nodiscard]] absl::Status Listen(const std::string& host, int port = 0);
  // "host:port" of the listening socket ("[v6addr]:port" for IPv6); empty before Listen.
  std::string address() const;

  // Connections currently open.
  size_t num_connections() const;

  struct Shared;
  class Session;

 private:
  void Accept();

  boost::asio::io_context& io_;
  boost::asio::ip::tcp::acceptor acceptor_;
  std::shared_ptr<Shared> shared_;
  std::string address_;
};

// Pulls objects from TransferServers into caller-provided memory (e.g. a
// freshly created, unsealed store object). One connection per server address,
// reused; requests are pipelined: an object is fetched as chunks of
// `chunk_bytes`, with up to `window` chunk requests outstanding per
// connection. Pulls to one server share its connection and are served in the
// order they were made. Not thread-safe: call it on the io thread (or while the
// loop is not running).
class TransferClient {
 public:
  explicit TransferClient(boost::asio::io_context& io, std::string token = "",
                          size_t chunk_bytes = 4 << 20, int window = 4);
  // Closes every connection; pulls still running fail with Cancelled (their
  // `done` is posted to the io_context).
  ~TransferClient();

  TransferClient(const TransferClient&) = delete;
  TransferClient& operator=(const TransferClient&) = delete;

  // Copies object `id` (exactly `size` bytes) from the server at `address`
  // ("host:port", "[v6addr]:port") into `dest`. `done` runs once, on the io
  // thread, never from inside Pull: OK, or an error — server unreachable:
  // Unavailable naming the address; object missing or of another size: the
  // server's NotFound / DataLoss with its message; connection lost mid-way:
  // Unavailable; a malformed address: InvalidArgument. Several Pulls may run at
  // once, to the same or different servers. `dest` must stay valid until
  // `done` runs; on error its contents are unspecified.
  void Pull(const std::string& address, const ObjectId& id, uint64_t size, uint8_t* dest,
            std::function<void(absl::Status)> done);

  // Connections currently open or being opened.
  size_t num_connections() const { return conns_.size(); }

  class Conn;

 private:
  boost::asio::io_context& io_;
  std::string token_;
  size_t chunk_bytes_;
  int window_;
  absl::flat_hash_map<std::string, std::shared_ptr<Conn>> conns_;
};

// Bytes per second of a plain loopback TCP copy of `bytes` (one sender
// thread, one receiver, 4 MiB writes/reads, the socket options of a transfer
// connection), the practical upper bound for TransferClient on this machine.
// Returns 0 if the copy failed.
double MeasureLoopbackTcpBytesPerSecond(uint64_t bytes);

}  // namespace lumen::objectstore
