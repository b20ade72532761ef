// Passing a file descriptor (the store's memfd) over a Unix-domain socket.
//
//   // Store side: the reply that carries the segment.
//   RETURN_IF_ERROR(SendWithFd(conn, reply.data(), reply.size(), segment->fd()));
//
//   // Client side:
//   size_t got = 0;
//   ASSIGN_OR_RETURN(int fd, RecvWithFd(conn, buf, sizeof(buf), &got));
//   ASSIGN_OR_RETURN(auto segment, ShmSegment::Attach(fd, segment_size));
//
// The fd travels as an SCM_RIGHTS control message attached to the first byte
// of the data. Stateless functions; thread-safe as long as two threads do not
// use the same socket at once.
#pragma once

#include <cstddef>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace lumen::objectstore {

// Sends `len` (> 0) bytes of `data` over the Unix socket `socket_fd`, with
// `fd_to_send` attached to the first chunk. Loops over partial writes, retries
// EINTR and, on a non-blocking socket, polls for writability on EAGAIN. Never
// raises SIGPIPE (MSG_NOSIGNAL): a closed peer gives UnavailableError. The
// caller keeps ownership of `fd_to_send`.
[[nodiscard]] absl::Status SendWithFd(int socket_fd, const void* data, size_t len, int fd_to_send);

// One non-blocking sendmsg of up to `len` (> 0) bytes of `data` with
// `fd_to_send` attached (retries EINTR only): for an event loop, which must
// not wait. Returns how many bytes the socket took (> 0; the fd went with
// them); the caller sends the rest without the fd. Errors: Unavailable when
// the socket took nothing (full, or the peer is gone), InvalidArgument for an
// empty `data` or a negative fd. The caller keeps ownership of `fd_to_send`.
absl::StatusOr<size_t> TrySendWithFd(int socket_fd, const void* data, size_t len, int fd_to_send);

// Reads with one recvmsg (blocking: retries EINTR, polls on EAGAIN) up to
// `capacity` bytes into `buf` and returns the file descriptor that came with
// them, opened O_CLOEXEC; the caller owns it. `*received` is the number of
// bytes read. On a stream socket the kernel stops the read at the end of the
// sender's chunk that carried the fd, so `*received` may be less than the
// sender's message: read the rest with ordinary reads. Errors: Unavailable on
// EOF, FailedPrecondition when the data carried no fd (the bytes are still
// consumed and counted in `*received`), DataLoss when the control message was
// truncated.
absl::StatusOr<int> RecvWithFd(int socket_fd, void* buf, size_t capacity, size_t* received);

}  // namespace lumen::objectstore
