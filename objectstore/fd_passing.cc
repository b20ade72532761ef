#include "lumen/objectstore/fd_passing.h"

#include <errno.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"

namespace lumen::objectstore {
namespace {

absl::Status SocketError(int err, const char* what) {
  std::string message = absl::StrCat(what, ": ", std::strerror(err));
  switch (err) {
    case EPIPE:
    case ECONNRESET:
    case ENOTCONN:
      return absl::UnavailableError(message);
    case EBADF:
    case ENOTSOCK:
    case EINVAL:
      return absl::InvalidArgumentError(message);
    case ENOMEM:
    case ENOBUFS:
    case ETOOMANYREFS:
    case EMFILE:
    case ENFILE:
      return absl::ResourceExhaustedError(message);
    default:
      return absl::InternalError(message);
  }
}

// Waits until `fd` is ready for `events`; returns the poll error if any.
absl::Status WaitFor(int fd, short events) {
  struct pollfd p = {fd, events, 0};
  while (poll(&p, 1, -1) < 0) {
    if (errno != EINTR) return SocketError(errno, "poll");
  }
  return absl::OkStatus();
}

// One sendmsg of `len` bytes of `data`, with `fd_to_send` attached when it is
// >= 0; retries EINTR. Returns sendmsg's result (errno set when < 0).
ssize_t SendMsg(int socket_fd, const char* data, size_t len, int fd_to_send, int flags) {
  struct iovec iov;
  iov.iov_base = const_cast<char*>(data);
  iov.iov_len = len;
  struct msghdr msg;
  std::memset(&msg, 0, sizeof(msg));
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof(int))];
  if (fd_to_send >= 0) {
    std::memset(control, 0, sizeof(control));
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    struct cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
    cmsg->cmsg_level = SOL_SOCKET;
    cmsg->cmsg_type = SCM_RIGHTS;
    cmsg->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(cmsg), &fd_to_send, sizeof(int));
  }
  ssize_t n;
  do {
    n = sendmsg(socket_fd, &msg, flags | MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  return n;
}

}  // namespace

absl::Status SendWithFd(int socket_fd, const void* data, size_t len, int fd_to_send) {
  if (len == 0) return absl::InvalidArgumentError("SendWithFd needs at least one byte of data");
  if (fd_to_send < 0) return absl::InvalidArgumentError("SendWithFd: invalid fd to send");

  const auto* bytes = static_cast<const char*>(data);
  size_t sent = 0;
  bool fd_sent = false;
  while (sent < len) {
    ssize_t n = SendMsg(socket_fd, bytes + sent, len - sent, fd_sent ? -1 : fd_to_send, 0);
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        absl::Status st = WaitFor(socket_fd, POLLOUT);
        if (!st.ok()) return st;
        continue;
      }
      return SocketError(errno, "sendmsg");
    }
    // Any accepted byte means the control message went with it.
    if (n > 0) fd_sent = true;
    sent += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::StatusOr<size_t> TrySendWithFd(int socket_fd, const void* data, size_t len, int fd_to_send) {
  if (len == 0) return absl::InvalidArgumentError("TrySendWithFd needs at least one byte of data");
  if (fd_to_send < 0) return absl::InvalidArgumentError("TrySendWithFd: invalid fd to send");
  ssize_t n = SendMsg(socket_fd, static_cast<const char*>(data), len, fd_to_send, MSG_DONTWAIT);
  if (n <= 0) {
    return absl::UnavailableError(
        absl::StrCat("sendmsg: ", n < 0 ? std::strerror(errno) : "nothing sent"));
  }
  return static_cast<size_t>(n);
}

absl::StatusOr<int> RecvWithFd(int socket_fd, void* buf, size_t capacity, size_t* received) {
  if (received != nullptr) *received = 0;
  if (capacity == 0) return absl::InvalidArgumentError("RecvWithFd needs a non-empty buffer");

  // Room for a few fds so that a misbehaving peer's extras are received (and
  // closed) rather than silently truncated.
  constexpr size_t kMaxFds = 8;
  alignas(struct cmsghdr) char control[CMSG_SPACE(kMaxFds * sizeof(int))];
  struct iovec iov;
  iov.iov_base = buf;
  iov.iov_len = capacity;
  struct msghdr msg;
  ssize_t n;
  while (true) {
    std::memset(&msg, 0, sizeof(msg));
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    n = recvmsg(socket_fd, &msg, MSG_CMSG_CLOEXEC);
    if (n >= 0) break;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      absl::Status st = WaitFor(socket_fd, POLLIN);
      if (!st.ok()) return st;
      continue;
    }
    return SocketError(errno, "recvmsg");
  }

  int fd = -1;
  int extra_fds = 0;
  for (struct cmsghdr* cmsg = CMSG_FIRSTHDR(&msg); cmsg != nullptr;
       cmsg = CMSG_NXTHDR(&msg, cmsg)) {
    if (cmsg->cmsg_level != SOL_SOCKET || cmsg->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (cmsg->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int got;
      std::memcpy(&got, CMSG_DATA(cmsg) + i * sizeof(int), sizeof(int));
      if (fd < 0) {
        fd = got;
      } else {
        close(got);
        ++extra_fds;
      }
    }
  }
  if (received != nullptr) *received = static_cast<size_t>(n);
  if (msg.msg_flags & MSG_CTRUNC) {
    if (fd >= 0) close(fd);
    return absl::DataLossError("RecvWithFd: control message truncated (too many fds sent)");
  }
  if (n == 0 && fd < 0) return absl::UnavailableError("RecvWithFd: peer closed the connection");
  if (fd < 0) return absl::FailedPreconditionError("RecvWithFd: message carried no fd");
  if (extra_fds > 0) {
    close(fd);
    return absl::InvalidArgumentError(
        absl::StrCat("RecvWithFd: expected one fd, received ", extra_fds + 1));
  }
  return fd;
}

}  // namespace lumen::objectstore
